"""Batch size ``auto`` (finetune/train/batch_fit.py): the search's rules over made-up trials,
what a CPU run resolves it to, the settings around it, and (with a CUDA GPU) trial steps."""

import json

import pytest
import torch
from run_helpers import tiny_run_config

from finetune.config import DEFAULT_BATCH, RunConfig, validate
from finetune.train import batch_fit, train
from finetune.train.batch_fit import GAIN, MIN_STEPS, Trial, search


def gpu(fits_below: int, speed, calls: list | None = None):
    """A made-up GPU: batches under ``fits_below`` fit; ``speed(b)`` tokens/s at batch b."""

    def try_batch(b: int) -> Trial:
        if calls is not None:
            calls.append(b)
        if b >= fits_below:
            return Trial(b, False, why="out of memory")
        return Trial(b, True, seconds=b * 100 / speed(b), tokens=b * 100, peak_gib=b / 64)

    return try_batch


def test_doubles_up_to_the_first_batch_that_does_not_fit():
    calls = []
    batch, trials, why = search(gpu(512, lambda b: 1000 * b, calls), limit=4096)
    assert batch == 256 and calls == [8, 16, 32, 64, 128, 256, 512]
    assert why == "512 rows did not fit (out of memory)"
    assert [t.fits for t in trials] == [True] * 6 + [False]


def test_stops_where_a_doubled_batch_is_no_longer_worth_its_lost_steps():
    # speed grows to batch 64, then only 3 % per doubling: a busy chip
    speed = lambda b: min(b, 64) * 1000 * (1.03 ** max(0, (b // 64).bit_length() - 1))  # noqa: E731
    calls = []
    batch, _, why = search(gpu(4096, speed, calls), limit=4096)
    assert batch == 64 and calls[-1] == 128
    assert "128 rows trained +3% tokens/s over 64" in why and f"{GAIN - 1:.0%}" in why


def test_keeps_enough_optimizer_steps_for_the_schedule():
    rows = 20_000  # one epoch: steps = rows / batch
    batch, _, why = search(gpu(4096, lambda b: 1000 * b), 4096, lambda b, trial: rows // b)
    assert batch == 128 and rows // batch >= MIN_STEPS > rows // (batch * 2)
    assert why == f"256 rows would leave {rows // 256} steps, under {MIN_STEPS}"


def test_the_steps_rule_never_takes_it_below_the_default():
    batch, trials, _ = search(gpu(4096, lambda b: 1000 * b), 4096, lambda b, trial: 10)
    assert batch == DEFAULT_BATCH and len(trials) == 2


def test_halves_below_the_default_when_that_does_not_fit():
    calls = []
    batch, _, why = search(gpu(3, lambda b: 1000 * b, calls), limit=4096)
    assert (batch, calls) == (2, [8, 4, 2]) and why == "4 rows did not fit (out of memory)"
    batch, _, why = search(gpu(1, lambda b: 1000.0), limit=4096)
    assert batch == 1 and why.startswith("not even 1 row fits")


def test_never_tries_more_rows_than_there_are_nor_past_its_share_of_a_budget():
    calls = []
    batch, _, why = search(gpu(4096, lambda b: 1000 * b, calls), limit=40)
    assert batch == 32 and calls[-1] == 32 and why == "64 rows would be more than the 40 there are"
    batch, _, why = search(gpu(4096, lambda b: 1000 * b), 4096, affordable=lambda s: False)
    assert batch == DEFAULT_BATCH and "time budget" in why


def test_the_sentence_names_the_batch_each_trial_and_the_reason():
    batch, trials, why = search(gpu(64, lambda b: 1000 * b), limit=4096)
    line = batch_fit.describe(batch, trials, why)
    assert line.startswith("batch size auto: 32 rows per micro-batch (64 rows did not fit")
    assert "8: 8k tokens/s, 0.1 GiB" in line and "64: out of memory" in line


def test_auto_is_a_setting_a_number_stays_one_and_other_words_are_refused():
    cfg = RunConfig()
    assert cfg.train.batch_size == "auto" and validate(cfg) == []
    cfg.train.batch_size = "big"
    (problem,) = validate(cfg)
    assert problem == "batch size must be a whole number between 1 and 4096, or auto (got 'big')"
    cfg.train.batch_size = 16
    assert validate(cfg) == [] and batch_fit.resolve(cfg, None, [], 0, False, "cuda") is None


def test_the_cli_and_the_train_form_take_auto_or_a_number():
    from finetune.commands.train_flags import whole_or_auto
    from ui.views import forms

    assert whole_or_auto("auto") == "auto" and whole_or_auto("24") == 24
    i = forms.TRAIN_FIELDS.index(("train", "batch_size"))
    values = forms.form_values(forms.ui_defaults())
    for typed, expected in (("auto", "auto"), ("Auto ", "auto"), ("12", 12), (64, 64)):
        values[i] = typed
        cfg, problems = forms.to_config(forms.DEMO_DATA, values)
        assert problems == [] and cfg.train.batch_size == expected
    values[i] = "many"
    assert forms.to_config(forms.DEMO_DATA, values)[1] == [
        "batch size must be auto or a whole number (got 'many')"
    ]


def test_a_cpu_run_trains_auto_at_the_default_exactly_as_that_number(tiny_llama_dir, home):
    """On the CPU ``auto`` is ``DEFAULT_BATCH`` with no trial: same losses as asking for it,
    the status line says why, the manifest keeps it, a checkpoint remembers it."""
    runs = {}
    for setting in ("auto", DEFAULT_BATCH):
        events = []
        cfg = tiny_run_config(tiny_llama_dir, batch_size=setting, max_steps=3, save_every=2)
        cfg.run.adapter_name = f"batch-{setting}"
        cfg.run.run_dir = str(home / f"run-{setting}")
        result = train(cfg, on_event=events.append)
        runs[setting] = (events, result)
    losses = {s: [e["loss"] for e in ev if e["type"] == "progress"] for s, (ev, _) in runs.items()}
    assert losses["auto"] == losses[DEFAULT_BATCH] and len(losses["auto"]) == 3
    events, result = runs["auto"]
    lines = [
        e["message"] for e in events if e["type"] == "status" and "batch size auto" in e["message"]
    ]
    assert lines == [f"batch size auto: {DEFAULT_BATCH} rows per micro-batch on the CPU"]
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["training"]["batch_size"] == DEFAULT_BATCH
    assert manifest["training"]["batch_auto"] == {
        "batch": DEFAULT_BATCH,
        "why": lines[0],
        "trials": [],
    }
    fixed = json.loads((runs[DEFAULT_BATCH][1].adapter_dir / "manifest.json").read_text())
    assert "batch_auto" not in fixed["training"]
    (ckpt,) = (home / "run-auto" / "checkpoints").iterdir()
    assert json.loads((ckpt / "progress.json").read_text())["batch_size"] == DEFAULT_BATCH


def test_a_resumed_auto_run_takes_the_batch_its_checkpoint_trained_with(tiny_llama_dir, home):
    cfg = tiny_run_config(tiny_llama_dir, batch_size=4, max_steps=2, save_every=1)
    cfg.run.run_dir = str(home / "run")
    train(cfg)
    cfg.train.batch_size, cfg.train.max_steps, cfg.run.resume = "auto", 3, True
    events = []
    result = train(cfg, on_event=events.append)
    assert result.steps == 3
    assert any(
        e.get("message") == "batch size auto: 4 rows per micro-batch, as the run began"
        for e in events
    )
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    assert manifest["training"]["batch_size"] == 4


def test_trial_steps_time_real_batches_and_leave_no_trace(tiny_llama_dir, home):
    """The trials a GPU runs, on the CPU (every batch fits there: no memory to measure): real
    forward and backward passes on the longest rows, then the LoRA weights, their gradients,
    the random generator and the model's mode are as before."""
    from finetune.train.setup import load_data, load_lora_model

    cfg = tiny_run_config(tiny_llama_dir, batch_size="auto")
    resolved, tokenizer, prepared = load_data(cfg)
    model, _, packing = load_lora_model(cfg, resolved, "cpu")
    model.eval()
    rows = list(prepared.train)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rng = torch.get_rng_state()
    trials = batch_fit.Trials(model, rows, tokenizer.pad_token_id, packing, "cpu", None, 0)
    with batch_fit.trial_conditions(model, "cpu"):
        batch, tried, why = search(trials, limit=16)
    assert [t.batch for t in tried][:2] == [8, 16] and all(t.fits for t in tried)
    lengths = sorted((len(r["input_ids"]) for r in rows), reverse=True)
    assert tried[0].tokens == sum(lengths[:8]) and all(t.seconds > 0 for t in tried)
    faster = tried[1].tokens_per_s >= GAIN * tried[0].tokens_per_s  # the rule, on these trials
    assert batch == (16 if faster else 8) and trials.spent >= sum(t.seconds for t in tried)
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n], w) and after[n].grad is None for n, w in before.items())
    assert torch.equal(torch.get_rng_state(), rng) and not model.training


def test_the_dry_run_and_the_train_tabs_check_say_what_auto_trains_at(tiny_llama_dir, home):
    from ui.views.train_check import dry_run_text

    cfg = tiny_run_config(tiny_llama_dir, batch_size="auto")
    text = dry_run_text(cfg)  # in a child process, as the Train tab runs it
    assert text.startswith("Dry run: one micro-batch of ")
    assert f"Batch size auto: {DEFAULT_BATCH} rows per micro-batch on the CPU. " in text
    cfg.train.batch_size = 4
    assert "auto" not in dry_run_text(cfg)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none here")
def test_on_a_gpu_trial_steps_pick_a_larger_batch_and_change_nothing_else(tiny_llama_dir, home):
    """The chosen batch fits and beats the default; the run then trains exactly as one given
    that batch (trial steps took no optimizer step and put the random generators back)."""
    runs = {}
    cfg = tiny_run_config(tiny_llama_dir, batch_size="auto", max_steps=3, device="cuda")
    cfg.data.max_samples = 4096
    result = train(cfg, on_event=(events := []).append)
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    chosen = manifest["training"]["batch_auto"]
    assert chosen["batch"] > DEFAULT_BATCH and manifest["training"]["batch_size"] == chosen["batch"]
    tried = {t["batch"]: t for t in chosen["trials"]}
    assert tried[chosen["batch"]]["fits"] and tried[DEFAULT_BATCH]["tokens"] > 0
    runs["auto"] = [e["loss"] for e in events if e["type"] == "progress"]
    cfg.train.batch_size = chosen["batch"]
    train(cfg, on_event=(events := []).append)
    runs["fixed"] = [e["loss"] for e in events if e["type"] == "progress"]
    assert runs["auto"] == pytest.approx(runs["fixed"], rel=1e-4)
