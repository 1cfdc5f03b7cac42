"""Chat tab: streaming answers from the base model or the active adapter."""

from __future__ import annotations

import gradio as gr

from core.user_text import check_unicode, replace_invalid
from serve.interface.ticket import ServerBusy
from ui.views import chat_grounding
from ui.views.answer_intent import chat_intent_line
from ui.views.state import BASE_LABEL, AppState

CHAT_CONCURRENCY = 32  # chats streaming at once; the scheduler queues what the batch cannot hold


def build_chat_tab(state: AppState) -> dict:
    with gr.Tab("Chat", id="chat") as tab:
        status = gr.Markdown(state.model_status_line(None), elem_id="chat-status")
        with gr.Row():
            adapter = gr.Dropdown(
                [BASE_LABEL],
                value=BASE_LABEL,
                label="Adapter",
                scale=3,
                elem_id="chat-adapter",
                allow_custom_value=False,
            )
            knowledge = gr.Dropdown(
                chat_grounding.choices(),
                value=state.chat_knowledge,
                scale=2,
                label="Answer from knowledge",
                elem_id="chat-knowledge",
            )
            refresh = gr.Button("↻ Refresh adapters", scale=1)
        chatbot = gr.Chatbot(label="Conversation", height=420, elem_id="chatbot")
        with gr.Row():
            message = gr.Textbox(
                placeholder="Ask a support question…",
                show_label=False,
                scale=5,
                elem_id="chat-input",
                submit_btn=False,
            )
            send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
        with gr.Row():
            retry = gr.Button("Retry last")
            clear = gr.Button("Clear", elem_id="chat-clear")
        with gr.Accordion("Correct the last answer", open=False):
            correction = gr.Textbox(
                label="A better answer (saved with a 👎 for review and training)",
                lines=3,
                elem_id="chat-correction",
            )
            save_correction = gr.Button("Save correction", elem_id="chat-save-correction")
        intent = gr.Markdown("", elem_id="chat-intent")  # the intent the last answer addressed
        answered_from = gr.Markdown("", elem_id="chat-answered-from")  # the passages it was shown
        rated = gr.Markdown("", elem_id="chat-rated")
        with gr.Accordion(
            "System prompt and generation settings", open=False, elem_id="chat-settings"
        ):
            system = gr.Textbox(
                label="System prompt",
                lines=2,
                elem_id="chat-system",
                value="You are a helpful customer-support assistant.",
            )
            with gr.Row():
                max_new = gr.Slider(1, 1024, value=200, step=1, label="Max new tokens")
                temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                top_p = gr.Slider(0.05, 1, value=0.9, step=0.05, label="Top-p")
                rep = gr.Slider(
                    1,
                    2,
                    value=1.1,
                    step=0.05,
                    label="Repetition penalty",
                    elem_id="chat-repetition",
                )
                # No minimum: Gradio's own check refused -1 with a bare "Error"; the generation
                # settings say what is allowed.
                seed = gr.Number(0, precision=0, label="Seed", elem_id="chat-seed")
        controls = [adapter, system, max_new, temperature, top_p, rep, seed]

        def choices():
            # The dropdown shows the adapter Chat answers with: the session's active one, which
            # the Adapters tab may have changed since this tab was last drawn.
            names = state.adapter_choices()
            active = state.active_adapter
            shown = active if active in names else BASE_LABEL
            return (
                gr.update(choices=[BASE_LABEL, *names], value=shown),
                gr.update(choices=chat_grounding.choices(), value=state.chat_knowledge),
            )

        def on_knowledge(chosen):
            state.chat_knowledge = chosen or chat_grounding.AUTO

        def on_switch(choice):
            name = state.to_adapter(choice)
            try:
                state.activate(name)
            except ValueError as err:
                gone = state.gone_from_shelf(name)  # deleted or renamed since the page listed it
                gr.Warning(gone or str(err))
                kept = state.active_adapter
                shown = choices()[0] if gone else gr.update(value=kept or BASE_LABEL)
                return shown, state.model_status_line(kept)
            return gr.update(), state.model_status_line(name)

        def status_line(choice):
            # this page's own choice: what answers its next message (another page may have
            # made another adapter the app-wide active one since)
            return state.model_status_line(state.to_adapter(choice))

        def respond(history, text, choice, *settings_values):
            history = list(history or [])
            if not text or not text.strip():
                yield history, "", gr.skip()
                return
            try:
                check_unicode(text)
            except ValueError as err:  # nothing is sent; the box keeps the text, marked (U+FFFD)
                gr.Warning(str(err))
                yield _shown(history), replace_invalid(text), gr.skip()
                return
            history.append({"role": "user", "content": text})
            yield from _stream(history, choice, settings_values, asked=text)

        def retry_last(history, choice, *settings_values):
            history = list(history or [])
            while history and history[-1]["role"] == "assistant":
                history.pop()
            if not history:
                yield history, "", gr.skip()
                return
            yield from _stream(history, choice, settings_values)

        def _stream(history, choice, settings_values, asked=""):
            """Answer the conversation; ``asked``: the text just sent, given back to the box
            when the page's adapter has left the shelf."""
            try:
                settings = state.settings(*settings_values)
                messages = [{"role": m["role"], "content": _text(m["content"])} for m in history]
                # the Knowledge dropdown's choice, app-wide like the adapter
                before = [dict(m) for m in history]
                messages, _, record = chat_grounding.grounded(
                    messages,
                    state.shelf(),
                    state.to_adapter(choice),
                    state.chat_knowledge,
                    settings.system_prompt,
                    settings.max_new_tokens,
                    state.session,
                )
                history.append({"role": "assistant", "content": ""})
                for partial in state.stream_answer(messages, state.to_adapter(choice), settings):
                    history[-1]["content"] = partial
                    yield history, "", gr.skip()
                # a rating of this answer keeps what it was shown
                state.answer_groundings.remember(
                    state.to_adapter(choice), before, history[-1]["content"], record
                )
            except (ValueError, ServerBusy) as err:
                history[-1:] = (
                    [] if history and history[-1]["role"] == "assistant" else history[-1:]
                )
                gone = state.gone_from_shelf(state.to_adapter(choice))
                if gone:  # deleted or renamed since the page listed it: not the session's path
                    # the question goes back to the box, to send with an adapter the shelf has
                    gr.Warning(gone)
                    kept = history[:-1] if asked else history
                    yield _shown(kept), asked, choices()[0]
                    return
                gr.Warning(str(err))
                yield _shown(history), "", gr.skip()

        def on_rate(history, choice, system_prompt, data: gr.LikeData, request: gr.Request = None):
            index = data.index if isinstance(data.index, int) else data.index[0]
            try:
                return state.rate_answer(
                    list(history or []),
                    index,
                    "up" if data.liked else "down",
                    state.to_adapter(choice),
                    system=system_prompt,
                    rater=_session(request),
                )
            except ValueError as err:
                gr.Warning(str(err))
                return ""

        def on_correct(history, choice, system_prompt, text, request: gr.Request = None):
            history = list(history or [])
            last = next(
                (i for i in range(len(history) - 1, -1, -1) if history[i]["role"] == "assistant"),
                -1,
            )
            try:
                if last < 0:  # the rating's own sentence asked to rate an answer
                    raise ValueError("there is no answer to correct yet: send a message first")
                if not (text or "").strip():
                    raise ValueError("write the better answer first")
                return state.rate_answer(
                    history,
                    last,
                    "down",
                    state.to_adapter(choice),
                    text,
                    system=system_prompt,
                    rater=_session(request),
                ), ""
            except ValueError as err:
                gr.Warning(str(err))
                return "", text

        chatbot.like(on_rate, [chatbot, adapter, system], rated)
        save_correction.click(
            on_correct, [chatbot, adapter, system, correction], [rated, correction]
        )
        tab.select(choices, None, [adapter, knowledge])
        refresh.click(choices, None, [adapter, knowledge], api_name="chat_adapters")
        knowledge.input(on_knowledge, knowledge, None)
        adapter.change(on_switch, adapter, [adapter, status])
        # Stable API name for scripted clients (gradio_client, the load test).
        # Many chats at once: each is a row of the scheduler's running batch (adapters/serve),
        # which caps the batch by memory and queues the rest, so Gradio need not serialize them.
        chat_events = {"concurrency_id": "chat", "concurrency_limit": CHAT_CONCURRENCY}

        def on_answered(history, choice, system_prompt, max_new_tokens=200):
            history = list(history or [])
            asked = [
                {"role": m["role"], "content": _text(m["content"])}
                for m in history
                if m["role"] == "user"
            ][-1:]
            line = (
                chat_grounding.grounded(
                    asked,
                    state.shelf(),
                    state.to_adapter(choice),
                    state.chat_knowledge,
                    system_prompt,
                    int(max_new_tokens),
                    state.session,
                )[1]
                if asked
                else ""
            )
            return chat_intent_line(state.shelf(), state.to_adapter(choice), history), line

        # the answer's own length and model: the line names what that answer was shown
        answered = ([chatbot, adapter, system, max_new], [intent, answered_from])
        # the third output: the Adapter dropdown, refreshed when its adapter left the shelf
        send.click(
            respond,
            [chatbot, message, *controls],
            [chatbot, message, adapter],
            api_name="chat",
            **chat_events,
        ).then(on_answered, *answered)
        message.submit(
            respond, [chatbot, message, *controls], [chatbot, message, adapter], **chat_events
        ).then(on_answered, *answered)
        retry.click(
            retry_last, [chatbot, *controls], [chatbot, message, adapter], **chat_events
        ).then(on_answered, *answered)
        clear.click(lambda: ([], "", "", ""), None, [chatbot, message, intent, answered_from])
        timer = gr.Timer(1.0)
        timer.tick(status_line, adapter, status, show_progress="hidden")
    return {"tab": tab, "adapter": adapter, "status": status}


def _shown(history: list[dict]) -> list[dict]:
    """History safe to send back: a client may have sent text that is not valid Unicode,
    which the browser's event stream cannot carry."""
    return [{**m, "content": replace_invalid(_text(m["content"]))} for m in history]


def _text(content) -> str:
    """Gradio may hand message content back as a list of parts; keep the text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _session(request) -> str | None:
    """The page's session (the rater of its ratings: one vote per answer), None outside one."""
    session = getattr(request, "session_hash", None)
    return f"session-{session}" if session else None
