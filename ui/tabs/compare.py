"""Compare tab: base and tuned answers to one prompt, side by side, decoded at the same time
on the serving engine (llama.cpp contexts side by side, or rows of one PyTorch batch)."""

from __future__ import annotations

import gradio as gr

from inference.session import is_base
from serve.interface.ticket import ServerBusy
from ui.views import chat_grounding
from ui.views.answer_intent import intents_of
from ui.views.feedback import engine_of, feedback_count, feedback_path, save_feedback
from ui.views.state import AppState

NONE = "(none)"


def base_alone(names: list[str]) -> str:
    """What to do when Compare answered with the base model alone (no adapter picked)."""
    if not names:
        return (
            "Only the base model answered: the shelf holds no adapter yet; train one in the "
            "Train tab (or import one in the Adapters tab) to compare it with the base model."
        )
    return "Only the base model answered: pick a Tuned adapter to see its answer beside it."


def build_compare_tab(state: AppState) -> dict:
    with gr.Tab("Compare", id="compare") as tab:
        answers_state = gr.State([])
        prompt_state = gr.State("")
        with gr.Row():
            first = gr.Dropdown([], label="Tuned adapter", scale=2, elem_id="compare-adapter")
            second = gr.Dropdown([NONE], value=NONE, label="Second adapter (optional)", scale=2)
            refresh = gr.Button("↻", scale=0, min_width=40)
        prompt = gr.Textbox(
            label="Customer message",
            lines=2,
            elem_id="compare-prompt",
            value="hi, I want a refund for order {{Order Number}}, it arrived broken",
        )
        with gr.Accordion("System prompt and generation settings", open=False):
            system = gr.Textbox(
                label="System prompt", value="You are a helpful customer-support assistant."
            )
            max_new = gr.Slider(8, 512, value=160, step=8, label="Max new tokens")
            rep = gr.Slider(1, 2, value=1.1, step=0.05, label="Repetition penalty")
        go = gr.Button("Compare", variant="primary", elem_id="compare-go")
        with gr.Row():
            # Each answer is labelled with the model that gives it, from before the first Compare.
            names = pane_names(state, None, NONE)
            panes = [
                gr.Textbox(
                    label=names[i] if i < len(names) else "",
                    lines=10,
                    interactive=False,
                    visible=i < 2,
                    elem_id=f"compare-pane-{i}",
                )
                for i in range(3)
            ]
        timing = gr.Markdown(elem_id="compare-timing")
        with gr.Accordion(
            "Which answer is better? (saved as training data and to the review queue)", open=True
        ):
            choice = gr.Radio([], label="Better answer", elem_id="compare-choice")
            correction = gr.Textbox(label="…or write the answer it should have given", lines=3)
            save = gr.Button("Save feedback", elem_id="compare-save")
            saved = gr.Markdown(elem_id="compare-saved")

        def choices():
            names = state.adapter_choices()
            return (
                gr.update(choices=names, value=names[0] if names else None),
                gr.update(choices=[NONE, *names]),
            )

        def relabel(a, b):
            # Other adapters picked: the answers shown were not theirs, so they go
            # with the old labels.
            names = pane_names(state, a, b)
            return [
                gr.update(label=names[i], value="", visible=True)
                if i < len(names)
                else gr.update(value="", visible=False)
                for i in range(3)
            ]

        def run(a, b, text, sys_prompt, n, penalty):
            names = pane_names(state, a, b)
            hidden = [
                gr.update(
                    value="", visible=i < len(names), label=names[i] if i < len(names) else ""
                )
                for i in range(3)
            ]
            if not (text or "").strip():
                gr.Warning("type a customer message first")
                return [*hidden, "", gr.update(), [], ""]
            adapters = [None] + [x for x in (a, b) if x and x != NONE]
            try:
                settings = state.settings(sys_prompt, n, 0.0, 0.9, penalty, 0)
                asked = [{"role": "user", "content": text}]
                # each pane grounded as Chat grounds it (Chat's "Answer from knowledge" choice)
                conversations, lines, records = chat_grounding.panes(
                    asked,
                    state.shelf(),
                    adapters,
                    state.chat_knowledge,
                    settings.system_prompt,
                    settings.max_new_tokens,
                    state.session,
                )
                answers, how = state.serving.compare(asked, adapters, settings, conversations)
            except (ValueError, ServerBusy) as err:
                gr.Warning(str(err))
                return [*hidden, "", gr.update(), [], ""]
            updates = []
            named = intents_of(
                state.shelf(), adapters, [x.text for x in answers]
            )  # answers in adapters' order
            for i in range(3):
                if i < len(answers):
                    ans = answers[i]
                    label = (
                        f"{answer_name(state, ans.adapter)} · version "
                        f"{ans.adapter_hash[:12]} · {named[i]}"
                    )
                    updates.append(gr.update(value=ans.text, visible=True, label=label))
                else:
                    updates.append(gr.update(value="", visible=False))
            shown = [
                {
                    "adapter": x.adapter,
                    "adapter_hash": x.adapter_hash,
                    "text": x.text,
                    "engine": engine_of(how),
                    "grounding": record,  # what the pane was shown, kept with its rating
                }
                for x, record in zip(answers, records, strict=True)
            ]
            info = f"{how} (greedy)." + "".join(
                f"  \n{answer_name(state, x.adapter)}: {line}"
                for x, line in zip(answers, lines, strict=True)
                if line
            )
            if len(adapters) == 1:  # the base alone: its pane is the only "better answer"
                info += f"  \n{base_alone(state.adapter_choices())}"
            return [
                *updates,
                info,
                gr.update(choices=[x.adapter for x in answers], value=None),
                shown,
                text,
            ]

        def on_save(text, shown, picked, corrected, request: gr.Request = None):
            session = getattr(request, "session_hash", None)
            try:
                _, rated = save_feedback(
                    text, shown, picked, corrected, rater=f"session-{session}" if session else None
                )
            except (ValueError, OSError) as err:
                return f"⚠️ {err}"
            return (
                f"Saved. {feedback_count()} feedback rows in `{feedback_path()}` — train on it "
                f"from the Train tab (Path); {len(rated)} rating(s) of the other answer(s) in "
                "the Review tab's queue, to accept and export as preference pairs."
            )

        tab.select(choices, None, [first, second])
        first.change(relabel, [first, second], panes, show_progress="hidden")
        second.change(relabel, [first, second], panes, show_progress="hidden")
        refresh.click(choices, None, [first, second], api_name="compare_adapters")
        go.click(
            run,
            [first, second, prompt, system, max_new, rep],
            [*panes, timing, choice, answers_state, prompt_state],
            api_name="compare",
        )
        save.click(on_save, [prompt_state, answers_state, choice, correction], saved)
    return {"tab": tab, "adapter": first}


def base_name(state: AppState) -> str:
    """The base model as a pane names it: its last path part (``SmolLM2-135M-Instruct``)."""
    return str(state.base_model).rstrip("/").rsplit("/", 1)[-1] or str(state.base_model)


def answer_name(state: AppState, adapter: str | None) -> str:
    """What gave an answer: ``base model <name>`` or ``adapter <name>``."""
    if adapter is None or adapter == "base" or is_base(adapter):
        return f"base model {base_name(state)}"
    return f"adapter {adapter}"


def pane_names(state: AppState, first: str | None, second: str | None) -> list[str]:
    """The panes' labels for the adapters picked: the base model first, then each adapter."""
    return [answer_name(state, None)] + [
        answer_name(state, x) for x in (first, second) if x and x != NONE
    ]
