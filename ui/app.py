"""Assemble the tabs into one Gradio Blocks app and launch it."""

from __future__ import annotations

import signal
import threading

import gradio as gr

from core.hosts import exposed
from serve.interface.bounds import set_answer_bound  # noqa: F401 (app.py sets the flags' bound with it)
from serve.keys import key_ring  # noqa: F401 (app.py reads the API's keys with it)
from ui.tabs.adapters import build_adapters_tab
from ui.tabs.chat import build_chat_tab
from ui.tabs.compare import build_compare_tab
from ui.tabs.evaluate import build_evaluate_tab
from ui.tabs.knowledge import build_knowledge_tab
from ui.tabs.review import build_review_tab
from ui.tabs.train import build_train_tab
from ui.views.state import AppState
from ui.views.typed_choice import ENTER_KEEPS_TYPED_JS

MAX_UPLOAD = "200mb"
QUEUE_SIZE = 64  # waiting events in Gradio's queue; the serving engines take the same bound


def build_app(
    base_model: str = "default", state: AppState | None = None, serving: str = "auto"
) -> gr.Blocks:
    """Build the UI over an :class:`AppState` (created here when not given; ``serving``: who
    answers Chat and the API, ``auto``, ``pytorch`` or ``llama.cpp``)."""
    state = state or AppState(base_model, serving)
    with gr.Blocks(title="TuneDesk") as demo:
        gr.Markdown(
            "# TuneDesk\nFine-tune a small LLM into a customer-support chatbot: "
            "train → evaluate → keep adapters → chat → compare."
        )
        with gr.Tabs(elem_id="tabs") as tabs:
            train = build_train_tab(state)
            evaluate = build_evaluate_tab(state, train["run_id"])
            build_adapters_tab(state)
            build_chat_tab(state)
            compare = build_compare_tab(state)
            build_review_tab(state)
            build_knowledge_tab(state)
        # A helpdesk import's held-out conversations become the Evaluate tab's dataset.
        train["imported"].then(
            lambda held_out: held_out or gr.skip(), train["held_out_file"], evaluate["data"]
        )
        train["to_compare"].click(
            lambda rid: _open_compare(state, rid), train["run_id"], [tabs, compare["adapter"]]
        )
        # Start loading the base model as soon as a page opens; Chat's status line shows progress.
        demo.load(lambda: state.session.load(wait=False))
        demo.load(lambda: state.serving.prepare(wait=False))  # llama.cpp GGUF, state timing
        for fn, inputs, outputs in train["on_load"]:
            demo.load(fn, inputs, outputs, show_progress="hidden")
    demo.state = state
    return demo


def _open_compare(state: AppState, run_id: str | None):
    from ui.views.train_progress import just_trained

    names = state.adapter_choices()
    return gr.Tabs(selected="compare"), gr.update(choices=names, value=just_trained(run_id, names))


def launch(
    demo: gr.Blocks,
    host: str = "127.0.0.1",
    port: int = 7860,
    auth=None,
    share: bool = False,
    prevent_thread_lock: bool = False,
    api_key=None,
    log_conversations: bool = False,
):
    """Serve the pages and, beside them in the same server, the OpenAI-compatible API
    (``/v1/...``; ``api_key``: a :class:`serve.keys.KeyRing`, one chat key, or None; see
    serve/keys.py). ``log_conversations``:
    keep each API answer's conversation (redacted) for feedback."""
    from feedback.store import FeedbackStore
    from serve.openai_api import OpenAIServer

    # One heavy event at a time per handler (Gradio's default concurrency limit of 1); chat
    # stays usable during training because training runs in its own child process.
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    # The API's routes go first into the app Gradio builds (FastAPI's `routes`), so no Gradio
    # route can shadow them; Gradio's login does not cover them, the bearer key does.
    store = FeedbackStore(log_conversations=log_conversations)
    api = OpenAIServer(demo.state.serving, api_key, store, stats=demo.state.alias_stats)
    routes = api.router().routes
    demo.state.warm_keeper = api.warm_keeper  # the Knowledge tab's kept warm-ups
    from serve.assembly import warn_unpassed

    warn_unpassed()  # the API serves every shelf adapter: say which have not passed their gate
    # The model loads (converted once) and llama-server starts now, not at the first page or
    # request: an API-only user's first answer does not wait for them, and the kept knowledge
    # warm-ups are read again as soon as llama-server serves.
    demo.state.serving.prepare(wait=False)
    if not prevent_thread_lock and threading.current_thread() is threading.main_thread():
        stop_on_signals(demo.state.serving)
    return demo.launch(
        server_name=host,
        server_port=port,
        auth=auth,
        share=share,
        max_file_size=MAX_UPLOAD,
        prevent_thread_lock=prevent_thread_lock,
        show_error=not exposed(),
        allowed_paths=[str(demo.state.home / "exports")],
        app_kwargs={"routes": routes},
        head=f"<script>{ENTER_KEEPS_TYPED_JS}</script>",  # Enter keeps the text typed
    )


def stop_on_signals(engines) -> None:
    """SIGTERM and Ctrl-C end every answer in flight with an error now (``Engines.close``, on
    its own thread), then stop the server the way Gradio stops on Ctrl-C (a
    ``KeyboardInterrupt`` in the main thread, which closes it within seconds).

    The handler takes no lock: it runs in the main thread wherever that was interrupted, and
    a second signal (``make run`` killed as a process group gets SIGTERM twice: once from the
    kill, once forwarded by make) once interrupted the first handler inside a lock it then
    waited on forever. A signal after the first is ignored: the stop is under way.
    """
    stopping: list[bool] = []  # a plain list: appending to it takes no lock

    def stop(signum, frame):
        if stopping:
            return
        stopping.append(True)
        threading.Thread(target=engines.close, daemon=True, name="tunedesk-stop").start()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
