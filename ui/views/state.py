"""The app's state object: what the tabs share. No gradio here — tabs call these methods.

One model session (base model loaded once, adapters hot-swapped), the adapter shelf, the
hardware description and the training runner.
"""

from __future__ import annotations

import os
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


UPLOAD_TYPES = (".jsonl", ".json", ".csv", ".parquet")
MAX_UPLOAD_BYTES = 200 * 2**20
# The columns of preference pairs (the Review tab's export), which DPO / CPO / ORPO train on
PAIR_COLUMNS = ("prompt", "chosen", "rejected")


def store_upload(temp_path: str) -> str:
    """Validate an uploaded dataset and keep a copy under ``datasets/uploads``.

    Raises:
        ValueError: wrong type, too big, or unreadable (the loader's message names why).
        OSError: the home folder cannot take the copy (read-only, full); nothing is left behind.
    """
    from core.hashing import file_hash
    from finetune.config import DataArgs
    from finetune.train.preflight import dataset_problems, pairs_problems

    src = Path(temp_path)
    if src.suffix.lower() not in UPLOAD_TYPES:
        raise ValueError(f"{src.name}: upload a {', '.join(UPLOAD_TYPES)} file")
    if src.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(
            f"{src.name} is {src.stat().st_size / 2**20:.0f} MiB; the upload limit is 200 MiB"
        )
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in src.stem)[:40] or "upload"
    name = f"{stem}-{file_hash(src)[:10]}{src.suffix.lower()}"
    # The checks a run makes (readable, known columns, no broken field), before a copy is
    # kept: a refused upload leaves nothing under datasets/uploads (nor an older copy of it).
    problems = dataset_problems(DataArgs(path=str(src)))
    if problems and _holds_pairs(src):  # preference pairs: checked as a DPO / ORPO run reads them
        problems = pairs_problems(src)
    if problems:
        (paths.home(create=False) / "datasets" / "uploads" / name).unlink(missing_ok=True)
        raise ValueError(problems[0])
    dest = paths.subdir("datasets") / "uploads" / name
    if not dest.exists():
        try:
            _copy_whole(src, dest)
        except OSError as err:
            raise OSError(
                f"could not keep a copy of {src.name} in {dest.parent}: {err.strerror or err}"
            ) from err
    return str(dest)


def _holds_pairs(path: Path) -> bool:
    """Whether the data file at ``path`` has the columns of preference pairs."""
    from finetune.data.load import load_rows

    try:
        return set(PAIR_COLUMNS) <= set(load_rows(path).column_names)
    except (ValueError, OSError):
        return False


def _copy_whole(src: Path, dest: Path) -> None:
    """Copy beside ``dest`` and rename: a full disk leaves no truncated file that a later
    upload of the same bytes would find and trust."""
    import shutil
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".upload-", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def preview(path: str, rows: int = 5) -> tuple[list[list[str]], list[str], str]:
    """First rows, their columns, and the detected column mapping (or, for preference pairs,
    what trains on them), for the Train tab.

    Raises:
        ValueError: unreadable data, unknown columns, or pairs a preference run cannot read.
    """
    from finetune.config import DataArgs
    from finetune.data.load import load_rows
    from finetune.data.rows import detect_mapping

    table = load_rows(path)
    if set(PAIR_COLUMNS) <= set(table.column_names):
        return _pairs_preview(path, rows)
    mapping = detect_mapping(table.column_names, DataArgs(path=path))
    head = table.select(range(min(rows, len(table))))
    cols = table.column_names
    values = [[str(r[c])[:200] for c in cols] for r in head]
    return values, cols, f"{len(table):,} rows · detected mapping: {mapping.describe()}"


def _pairs_preview(path: str, rows: int) -> tuple[list[list[str]], list[str], str]:
    """Preference pairs read as a preference run reads them (prompt = its last user turn)."""
    from finetune.train.preference import read_pairs

    pairs = read_pairs(path)  # the checks Check makes for DPO / CPO / ORPO
    values = [
        [
            next((m["content"] for m in reversed(p["prompt"]) if m["role"] == "user"), "")[:200],
            p["chosen"][:200],
            p["rejected"][:200],
        ]
        for p in pairs[:rows]
    ]
    info = (
        f"{len(pairs):,} preference pair{'' if len(pairs) == 1 else 's'} (prompt, chosen, "
        "rejected): Method DPO, CPO or ORPO "
        "(under Advanced) trains on them, starting from an adapter on the shelf; SFT needs "
        "prompt/response rows"
    )
    return values, list(PAIR_COLUMNS), info


def estimate_text(cfg) -> str:
    """Memory estimate for the Train tab (reads the model config only; loads no weights)."""
    from core.models import resolve
    from finetune.train.dryrun import estimate_memory
    from finetune.train.model_cost import cost_text

    resolved = resolve(cfg.model.name)
    est = estimate_memory(cfg, resolved)
    fits = "fits" if est["fits"] else "**will not fit**"
    text = (
        f"Settings are valid. Estimated peak memory {est['total_gib']:.1f} GiB on {est['device']} "
        f"({est['device_gib']:.0f} GiB) — {fits}: weights {est['weights_gib']:.2f}, activations "
        f"{est['activations_gib']:.2f}, logits {est['logits_gib']:.2f}, LoRA+optimizer "
        f"{est['lora_and_optimizer_gib']:.2f} GiB; {est['lora_params']:,} trainable parameters."
    )
    if cfg.train.time_budget_s > 0 and cfg.train.method != "sft":
        text += (
            f" The {cfg.train.method.upper()} run trains {_steps_or_epochs(cfg.train)} or until "
            f"its time budget, {cfg.train.time_budget_s / 60:g} min from start to saved adapter, "
            "ends: whichever comes first."
        )
    elif cfg.train.time_budget_s > 0:
        from finetune.train.speed_record import budget_text

        text += (
            f" The run takes its time budget, {cfg.train.time_budget_s / 60:g} min from start to "
            "saved adapter: it times its first steps and sizes the rest to end on time.\n\n"
            + budget_text(cfg)
        )
    text += f"\n\n⚠️ {est['warning']}" if est["warning"] else ""
    # The picked model's measured speed and serving rate, when the table has it.
    cost = cost_text(cfg, name=resolved.name)
    return text + (f"\n\n{cost}" if cost else "")


def model_note(name: str | None) -> str:
    """What the picked model cost as measured, shown under the picker as soon as it is picked
    (nothing is downloaded; Check adds the steps the settings' time budget holds); "" for a model
    the table lacks."""
    from finetune.config import RunConfig
    from finetune.train.model_cost import cost_text

    cfg = RunConfig()  # no time budget: steps depend on settings Check reads
    cfg.model.name = name or ""
    return cost_text(cfg)


def _steps_or_epochs(t) -> str:
    return f"{t.max_steps} steps" if t.max_steps > 0 else f"{t.epochs:g} epochs"


def compile_sentence(c: dict | None) -> str:
    """What the dry run found of compiling the decoder layers ("" where the run does not)."""
    if not c:
        return ""
    if not c.get("compiled"):
        return (
            f"Compiling the decoder layers failed here ({c.get('compile_failed')}): the run "
            "trains eagerly. "
        )
    return (
        f"The run compiles its decoder layers: its first step takes {c.get('compile_s', 0):.0f} s "
        "more, and the step above ran compiled. "
    )


def dry_run_text(cfg) -> str:
    """Run one real training step (nothing is saved) and report its time and memory.

    It runs in a child process: its memory goes back when it ends, and its peak is its own,
    not the chat model's too.
    """
    from finetune.train.dryrun_process import dry_run_in_child

    r = dry_run_in_child(cfg)
    minutes = r.get("projected_seconds", 0) / 60
    text = (
        f"Dry run: one micro-batch of {r.get('tokens_per_micro_batch', 0):,} tokens took "
        f"{r.get('seconds_per_step', 0):.2f} s, peak memory {r.get('peak_memory_gib', 0):.2f} "
        "GiB. "
    )
    if r.get("batch_auto"):  # batch size "auto": what it resolved to here, and why
        text += r["batch_auto"][0].upper() + r["batch_auto"][1:] + ". "
    text += compile_sentence(r.get("compile"))
    if (
        cfg.train.time_budget_s > 0 and "budget" in r
    ):  # the steps left after start-up and validation
        b = r["budget"]
        return text + ("⚠️ " if b["verdict"] == "refuse" else "") + b["sentence"]
    return (
        text + f"The whole run ({r.get('total_steps')} steps) should take about {minutes:.1f} min."
    )
