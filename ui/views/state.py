"""The app's state object: what the tabs share. No gradio here — tabs call these methods.

One model session (base model loaded once, adapters hot-swapped), the adapter shelf, the
hardware description and the training runner.
"""

from __future__ import annotations

from pathlib import Path

from adapters.shelf.store import Shelf
from core import paths
from core.hardware import detect
from core.store.home import open_store
from core.templates import control_sentence, first_control
from inference.generate import GenerationSettings
from serve.assembly import build_services
from serve.interface.bounds import failure_sentence
from serve.interface.ticket import ServerBusy
from serve.version_stats import VersionStats
from ui.views import chat_grounding

BASE_LABEL = "base model (no adapter)"


class AppState:
    """Shared state behind the tabs."""

    def __init__(self, base_model: str = "default", serving: str = "auto"):
        # transformers is imported whole here, before any worker thread: the model load that
        # opening a page starts imports it in a thread, and a dataset load racing it (datasets
        # looks transformers up in sys.modules while it is half-imported) failed with "module
        # 'transformers' has no attribute 'PreTrainedTokenizerBase'".
        import transformers  # noqa: F401

        from core.models import DEFAULT_MODEL, is_default

        self.home = paths.home()
        self.base_model = DEFAULT_MODEL if is_default(base_model) else base_model
        self.hardware = detect()
        services = build_services(base_model, serving)
        self.session = services.session
        # Who answers Chat and the API: PyTorch or llama.cpp, measured on this machine (auto).
        self.serving = services.engines
        # The API's live figures per alias version; the Adapters tab plots them.
        self.alias_stats = VersionStats(store=open_store())
        # What Chat's answers are grounded in (ui/views/chat_grounding.py),
        # app-wide like the adapter.
        self.chat_knowledge = chat_grounding.AUTO
        # what Chat's recent answers were grounded in, kept with their ratings
        self.answer_groundings = chat_grounding.AnswerGroundings()
        # The API server's kept knowledge warm-ups (serve/warm_keeper.py), set by ui.app.launch
        # once the API is mounted; None where the UI runs without it.
        self.warm_keeper = None

    @property
    def active_adapter(self) -> str | None:
        """The adapter Chat uses (None = base model); the session keeps it."""
        return self.session.status().get("active")

    def activate(self, name: str | None):
        """Hot-swap Chat's adapter (loads it once; the base model is never reloaded)."""
        return self.session.activate(name)

    # -- adapters ---------------------------------------------------------------------------
    def shelf(self) -> Shelf:
        return Shelf()

    def adapter_choices(self) -> list[str]:
        """Adapters that can be chosen in Chat/Compare (broken ones are left out)."""
        return [e.name for e in self.shelf().list() if e.ok]

    @staticmethod
    def to_adapter(choice: str | None) -> str | None:
        return None if not choice or choice == BASE_LABEL else choice

    def model_status_line(self, adapter: str | None = None) -> str:
        """Chat's status line for a page answering with ``adapter`` (None: the base model).

        Each page answers with its own dropdown's choice, so the line names that choice, not
        the app-wide active adapter another page may have changed since.
        """
        s = self.session.status()
        model = s.get("model") or s.get("base")
        state = s["state"]
        if state == "ready":
            text = (
                f"**Model:** {model} — ready on {s['device']} ({s['dtype']}, "
                f"{s.get('dtype_reason', '')}; loaded in {s['load_seconds']:.1f} s)"
            )
        elif state == "error":
            text = f"**Model:** could not load {model}: {s['error']}"
        else:
            text = f"**Model:** {model} — {state}…"
        gone = " — ⚠️ no longer on the shelf; pick another adapter"
        note = gone if self.gone_from_shelf(adapter) else self._gate_note(adapter)
        text += f"  \n**Active adapter:** {adapter or 'none (base model)'}{note}"
        return text + f"  \n**Answers from:** {self.serving.describe()}"

    def gone_from_shelf(self, adapter: str | None) -> str | None:
        """The sentence for a page's adapter that is no longer on the shelf (deleted or renamed
        since the page listed it), else None."""
        if adapter is None:
            return None
        try:
            self.shelf().path(adapter)  # its folder only: the timer asks every second
        except ValueError:
            return f"{adapter} is no longer on the shelf; pick another adapter"
        return None

    def _gate_note(self, adapter: str | None) -> str:
        """`` — ⚠️ release gate: failed (...)`` when ``adapter`` has not passed it."""
        from adapters.shelf.gate_rules import entry_status

        if not adapter:
            return ""
        try:
            status = entry_status(self.shelf().get(adapter))
        except (ValueError, OSError):
            return ""
        if status.passed:
            return " — release gate passed"
        why = f": {'; '.join(status.reasons)}" if status.reasons else ""
        return f" — ⚠️ release gate {status.state}{why}"

    def rate_answer(
        self,
        history: list[dict],
        index: int,
        rating: str,
        adapter: str | None,
        correction: str | None = None,
        system: str | None = None,
        rater: str | None = None,
    ) -> str:
        """Store a rating of Chat's answer at ``history[index]`` (asked under the system prompt
        ``system``, kept with the conversation) by ``rater`` (the page's session: rating the
        same answer again replaces its rating); the sentence to show.

        Raises:
            ValueError: nothing to rate there, a bad rating or correction, an unusable adapter.
        """
        from serve.engines import label
        from ui.views.feedback import rate_chat_answer

        version = self.serving.weights_hash(adapter)
        answered = history[index] if 0 <= index < len(history) else {}
        grounding = self.answer_groundings.get(adapter, history[:index], answered.get("content"))
        row = rate_chat_answer(
            history,
            index,
            rating,
            adapter,
            version,
            label(self.serving.pick(adapter)),
            correction,
            system,
            rater,
            grounding,
        )
        what = "with your correction" if row["correction"] else ""
        return (
            f"Saved {'👍' if rating == 'up' else '👎'} {what} for {row['adapter']} (version "
            f"{row['version'][:8]}) to the review queue."
        )

    def stream_answer(
        self, messages: list[dict], adapter: str | None, settings: GenerationSettings
    ):
        """Chat's answer from the serving engine; yields the text so far.

        Raises:
            ValueError: bad settings or messages (text spelling a control token of the model,
                the system prompt's too), an unusable adapter, a full queue, or the engine's
                failure or timeout (said in a sentence).
        """
        texts = [
            ("the system prompt", settings.system_prompt),
            *(
                (f"message {i + 1} ({m.get('role')})", m.get("content"))
                for i, m in enumerate(messages)
            ),
        ]
        at = first_control(self.session.tokenizer, texts)
        if at is not None:
            raise ValueError(control_sentence(at))
        try:
            ticket = self.serving.submit(messages, adapter, settings)
        except ServerBusy as err:
            raise ValueError(str(err)) from None
        text = ""
        try:
            for delta in ticket:
                text += delta
                yield text
        except ValueError:
            raise
        except Exception as err:  # the engine failed or timed out: a sentence for the page
            raise ValueError(failure_sentence(err)) from err
        finally:
            ticket.cancel()  # the page went away mid-answer: stop decoding
        if not text:
            yield text  # an empty answer is still one value for the chat to show

    def settings(
        self, system_prompt: str, max_new_tokens, temperature, top_p, repetition_penalty, seed
    ) -> GenerationSettings:
        """Generation settings from form values, checked.

        Raises:
            ValueError: naming every bad value (an empty box, NaN, out of range); never a
                TypeError from a conversion.
        """
        if seed is None:  # a blank Seed box (the others are sliders, which are never blank)
            raise ValueError("the Seed box is empty: type a whole number of 0 or more")
        settings = GenerationSettings(
            max_new_tokens=_whole(max_new_tokens),
            temperature=_number(temperature),
            top_p=_number(top_p),
            repetition_penalty=_number(repetition_penalty),
            seed=_whole(seed),
            system_prompt=system_prompt or "",
        )
        settings.check()
        return settings

    def feedback_dir(self) -> Path:
        return paths.subdir("feedback")


def _number(value):
    """A float for a number (bools and text are left as they are, for validation to name)."""
    return (
        float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    )


def _whole(value):
    """An int for a whole number, even when a form sends 12.0; anything else unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
