"""What the Train tab shows about a run, rebuilt from its files on every poll.

Nothing is kept in memory: after a page reload or an app restart the tab finds the run on
disk and shows the same thing.
"""

from __future__ import annotations

import html

import pandas as pd

from core.events import read_events
from finetune.train import runner
from finetune.train.budget_plan import MIN_USEFUL_STEPS
from ui.views.wording import for_ui

CURVE_SERIES = ("train", "validation")


def curve_frame(points: list[dict]) -> pd.DataFrame:
    """The loss-curve table for ``gr.LinePlot``, with one blank row per series.

    Gradio's plot fixes the colour scale from the value it is first drawn with and later
    only swaps the data, so a series missing from the first value is never drawn. The blank
    rows (loss NaN, which the plot skips) name both series from the start.
    """
    blank = [{"step": 0, "loss": float("nan"), "series": name} for name in CURVE_SERIES]
    return pd.DataFrame(points + blank, columns=["step", "loss", "series"])


def latest_run_id() -> str | None:
    """The active run if any, else the most recent one (for re-attaching)."""
    runs = runner.list_runs()
    chosen = [r for r in runs if r.state in runner.ACTIVE] or runs
    return chosen[0].run_id if chosen else None


def just_trained(run_id: str | None, names: list[str]) -> str | None:
    """The adapter that run ``run_id`` (or the latest run) saved, once it has finished with at
    least one step and the adapter is among ``names`` (the shelf's whole adapters); else None."""
    view = run_view(run_id or latest_run_id())
    adapter = view.get("adapter")
    return adapter if adapter in names and view["comparable"] else None


def run_view(run_id: str | None) -> dict:
    """Everything the tab displays for ``run_id``: progress, curves, probes, log, result."""
    if not run_id:
        return {
            "state": "none",
            "progress_html": _bar(0, "No training run yet."),
            "curve": [],
            "probes": [],
            "log": "",
            "result": "",
            "adapter": None,
            "active": False,
            "comparable": False,
        }
    info = runner.get(run_id)
    events, _ = read_events(info.run_dir / "events.jsonl")
    state = info.state
    progress = [e for e in events if e["type"] == "progress"]
    evals = [e for e in events if e["type"] == "eval"]
    probes = next((e for e in reversed(events) if e["type"] == "probe"), None)
    start = next((e for e in events if e["type"] == "start"), None)
    last_status = next((e.get("message") for e in reversed(events) if e["type"] == "status"), "")
    done = next((e for e in reversed(events) if e["type"] == "done"), {})
    curve = [{"step": e["step"], "loss": e["loss"], "series": "train"} for e in progress]
    curve += [{"step": e["step"], "loss": e["val_loss"], "series": "validation"} for e in evals]
    adapter = info.status.get("adapter")
    return {
        "state": state,
        "progress_html": _progress_html(
            state, start, progress[-1] if progress else None, last_status, info.status, done
        ),
        "curve": curve,
        "probes": [[a["prompt"], a["answer"]] for a in (probes or {}).get("answers", [])],
        "probe_step": (probes or {}).get("step"),
        "log": runner.log_tail(info.run_dir, 15),
        "result": _result_text(state, adapter, info.status, evals, done),
        "adapter": adapter,
        "active": state in runner.ACTIVE,
        # an adapter of 0 steps answers exactly as the base model: nothing to compare
        "comparable": bool(adapter) and state not in runner.ACTIVE and done.get("step") != 0,
        "run_id": run_id,
    }


def _progress_html(state, start, last, message, status, done) -> str:
    """The bar and its line; ``last``: the latest progress event, ``done``: the run's "done"
    event ({} before it ends)."""
    if last is None:
        text = {
            "queued": "Queued…",
            "running": message or "Starting…",
            "stopping": "Stopping…",
        }.get(state, "")
        if state == "failed":
            text = f"Failed: {for_ui(str(status.get('reason', '')))}"
        elif state == "stopped" and not status.get("adapter"):  # Stop while it was loading
            text = "Stopped before training began: nothing to save."
        elif state in ("done", "stopped") and "step" in done:  # it ended before a progress event
            text = _ended_line(state, done)
        return _bar(0, text)
    pct = 100.0 * last["step"] / max(last["total_steps"], 1)
    eta = _clock(last["eta"]) if state in runner.ACTIVE else "—"
    text = (
        f"{state}: step {last['step']}/{last['total_steps']} · epoch {last['epoch']:.2f} · loss "
        f"{last['loss']:.3f} · {last['tokens_per_second']:.0f} tokens/s · elapsed "
        f"{_clock(last['elapsed'])} · ETA {eta} · peak memory {last['peak_memory_gib']:.2f} GiB"
    )
    if start and start.get("batch_auto"):  # batch size "auto": what it resolved to
        text += f" · batch {start['batch_size']} (auto)"
    if last.get("compile_s") is not None:
        text += f" · compiled layers (first step {last['compile_s']:.0f} s)"
    return _bar(pct, text)


def _ended_line(state: str, done: dict) -> str:
    if state == "stopped" and done["step"] == 0:
        return "Stopped before its first training step (step 0)."
    return f"{state}: step {done['step']}/{done.get('total_steps', '?')}"


def _bar(pct: float, text: str) -> str:
    return (
        f'<div id="train-progress" data-pct="{pct:.1f}">'
        f'<div style="background:#e5e7eb;border-radius:6px;height:14px">'
        "<div "
        f'style="width:{pct:.1f}%;background:#f97316;height:14px;border-radius:6px"></div></div>'
        f'<div style="margin-top:4px">{html.escape(text)}</div></div>'
    )


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _result_text(state, adapter, status, evals, done) -> str:
    """The result under the run; ``done``: its "done" event, whose note says when the run's
    time budget bought too few steps ({} before it ends)."""
    if state in ("done", "stopped") and adapter:
        if state == "stopped" and done.get("step") == 0:  # the user's Stop, not the budget
            return (
                f"Training was stopped before its first step. Adapter **{adapter}** is on the "
                "shelf, but no step was taken: it answers exactly as the base model, so there "
                "is nothing to compare. Start again and let it train."
            )
        ppl = ""
        if len(evals) >= 2:
            ppl = (
                f" Validation perplexity {evals[0]['val_perplexity']:.2f} → "
                f"{evals[-1]['val_perplexity']:.2f}."
            )
        how = (
            "finished"
            if state == "done"
            else "was stopped; the adapter was saved at the current step"
        )
        note = done.get("note", "")
        if note and state == "stopped":  # the budget did not end it: say what the Stop left
            steps = done.get("step")
            note = (
                f"stopped after {steps} step{'' if steps == 1 else 's'}, fewer than the "
                f"{MIN_USEFUL_STEPS} a useful run needs: the adapter has barely changed"
            )
        warn = f"\n\n⚠️ Too short to be useful: {note}." if note else ""
        return f"Training {how}. Adapter **{adapter}** is on the shelf.{ppl}{warn}"
    if state == "stopped" and not adapter:
        return (
            "Training was stopped before it began: nothing to save, and the shelf is unchanged. "
            "Press Start to train again."
        )
    if state == "failed":
        reason = for_ui(str(status.get("reason", "unknown reason")))
        return f"Training failed: {reason}. See the log below."
    return ""
