"""The loss-curve value handed to Gradio's LinePlot (the browser tests check what it draws)."""

from __future__ import annotations

import math

import gradio as gr

from ui.views.train_progress import CURVE_SERIES, curve_frame


def _plotted(frame):
    """What the LinePlot sends to the browser for ``frame``."""
    return gr.LinePlot(x="step", y="loss", color="series").postprocess(frame)


def test_the_first_value_already_names_both_series_as_categories():
    sent = _plotted(curve_frame([]))
    assert sent.datatypes["series"] == "nominal"  # a numeric colour scale draws no lines
    series = {row[sent.columns.index("series")] for row in sent.data}
    assert series == set(CURVE_SERIES)


def test_real_points_keep_their_values_and_the_blank_rows_are_not_drawable():
    points = [
        {"step": 1, "loss": 2.5, "series": "train"},
        {"step": 2, "loss": 2.1, "series": "train"},
    ]
    frame = curve_frame(points)
    real = frame[frame["loss"].notna()]
    assert real.to_dict("records") == points
    blank = frame[frame["loss"].isna()]
    assert sorted(blank["series"]) == sorted(CURVE_SERIES)
    sent = _plotted(frame)
    assert sent.datatypes["step"] == sent.datatypes["loss"] == "quantitative"
    losses = [row[sent.columns.index("loss")] for row in sent.data]
    assert sum(1 for v in losses if v is None or (isinstance(v, float) and math.isnan(v))) == len(
        CURVE_SERIES
    )


def test_a_finished_run_that_bought_too_few_steps_says_so_under_the_result(home):
    import json
    import time

    from core.events import write_status
    from ui.views.train_progress import run_view

    note = (
        "the 5-minute budget bought only 4 steps, fewer than the 30 a useful run needs "
        "(start-up 80 s, ...)"
    )
    run_dir = home / "runs" / "short"
    run_dir.mkdir(parents=True)
    events = [
        {"type": "eval", "step": 0, "val_loss": 1.8, "val_perplexity": 6.05},
        {"type": "eval", "step": 4, "val_loss": 1.7, "val_perplexity": 5.47},
        {
            "type": "done",
            "status": "done",
            "step": 4,
            "total_steps": 4,
            "adapter": "bitext",
            "note": note,
        },
    ]
    (run_dir / "events.jsonl").write_text(
        "".join(json.dumps({**e, "time": time.time()}) + "\n" for e in events)
    )
    write_status(run_dir, state="done", adapter="bitext", created=time.time())
    result = run_view("short")["result"]
    assert result == (
        "Training finished. Adapter **bitext** is on the shelf. Validation perplexity 6.05 → 5.47."
        f"\n\n⚠️ Too short to be useful: {note}."
    )
    events[-1].pop("note")  # a run that bought enough steps: the result as before
    (run_dir / "events.jsonl").write_text(
        "".join(json.dumps({**e, "time": time.time()}) + "\n" for e in events)
    )
    assert "⚠️" not in run_view("short")["result"]


STEP = {
    "type": "progress",
    "step": 40,
    "total_steps": 400,
    "epoch": 0.5,
    "loss": 1.25,
    "tokens_per_second": 90000.0,
    "elapsed": 30.0,
    "eta": 540.0,
    "peak_memory_gib": 12.5,
}


def _progress_line(home, run: str, events: list[dict]) -> str:
    """The Train tab's progress line for a running run whose events.jsonl holds ``events``."""
    import json
    import time

    from core.events import write_status
    from ui.views.train_progress import run_view

    run_dir = home / "runs" / run
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"time": time.time(), **e}) + "\n" for e in events)
    (run_dir / "events.jsonl").write_text("".join(lines))
    write_status(run_dir, state="running", created=time.time())
    return run_view(run)["progress_html"]


def test_the_progress_line_says_when_the_steps_run_through_compiled_layers(home):
    for event, said in ((STEP, False), ({**STEP, "compile_s": 14.2}, True)):
        line = _progress_line(home, "gpu", [event])
        assert "step 40/400" in line
        assert ("compiled layers (first step 14 s)" in line) is said


def test_the_progress_line_says_the_batch_auto_chose(home):
    for auto, said in ((False, False), (True, True)):
        start = {"type": "start", "batch_size": 512, "batch_auto": auto}
        line = _progress_line(home, "auto", [start, STEP])
        assert "step 40/400" in line and ("batch 512 (auto)" in line) is said


def test_a_run_stopped_before_its_first_step_says_nothing_was_saved(home, tiny_llama_dir):
    """Stop pressed before step 1 of a 3-minute budget run (real training of a tiny model, its
    events written as the Train tab's child writes them): the tab says it was stopped before
    training began with nothing to save, blames no budget, fails nothing and offers no
    Compare; the shelf is untouched."""
    import time

    from core.events import EventLog, write_status
    from finetune.config import RunConfig
    from finetune.train import train
    from ui.views.train_progress import just_trained, run_view

    run_dir = home / "runs" / "stopme"
    run_dir.mkdir(parents=True)
    cfg = RunConfig()
    cfg.model.name = str(tiny_llama_dir)
    cfg.data.path, cfg.data.max_samples, cfg.data.max_length = "assets/demo_support.jsonl", 40, 64
    cfg.lora.r, cfg.lora.alpha = 4, 8
    cfg.train.time_budget_s, cfg.train.batch_size = 180, 4
    cfg.run.adapter_name, cfg.run.run_dir = "stopme", str(run_dir)
    # as the tab leaves it: Stop pressed (stopping), and the run's process has ended since
    write_status(run_dir, state="stopping", run_id="stopme", created=time.time())
    result = train(cfg, on_event=EventLog(run_dir / "events.jsonl"), stop=lambda: True)
    assert result.status == "stopped" and result.steps == 0 and result.adapter_dir is None
    view = run_view("stopme")
    assert view["state"] == "stopped"
    assert "Stopped before training began: nothing to save." in view["progress_html"]
    assert view["result"] == (
        "Training was stopped before it began: nothing to save, and the shelf is unchanged. "
        "Press Start to train again."
    )
    assert not view["comparable"] and just_trained("stopme", []) is None
    assert not (home / "adapters" / "stopme").exists()

    # Stop that reached the child before it could answer (killed by SIGTERM while starting up)
    early = home / "runs" / "early"
    early.mkdir()
    (early / "stop").touch()
    write_status(early, state="stopping", run_id="early", created=time.time(), exit_code=-15)
    view = run_view("early")
    assert view["state"] == "stopped" and "Training failed" not in view["result"], view
    assert "nothing to save" in view["result"]


def test_a_run_stopped_after_a_few_steps_blames_the_stop_not_the_budget(home):
    import json
    import time

    from core.events import write_status
    from ui.views.train_progress import just_trained, run_view

    run_dir = home / "runs" / "few"
    run_dir.mkdir(parents=True)
    note = "the 3-minute budget bought only 4 steps, fewer than the 30 a useful run needs (...)"
    done = {"type": "done", "status": "stopped", "step": 4, "total_steps": 40, "note": note}
    (run_dir / "events.jsonl").write_text(json.dumps({**done, "time": time.time()}) + "\n")
    write_status(run_dir, state="stopped", adapter="few", created=time.time())
    view = run_view("few")
    assert "stopped: step 4/40" in view["progress_html"]
    assert view["result"] == (
        "Training was stopped; the adapter was saved at the current step. Adapter **few** is on "
        "the shelf.\n\n⚠️ Too short to be useful: stopped after 4 steps, fewer than the 30 a "
        "useful run needs: the adapter has barely changed."
    )
    assert view["comparable"] and just_trained("few", ["few"]) == "few"
