"""Check's sentence on what the picked model costs, from a small fixture table: a catalog model
on the measured machine, the same on another CPU, a model the table lacks, and a time budget
this machine has measured itself."""

from __future__ import annotations

from finetune.config import RunConfig
from finetune.train.budget_plan import Measured
from finetune.train.model_cost import cost_text

EPYC = {"cpu": "AMD EPYC", "cores": 2, "flags": {"avx2": True, "avx512_bf16": False, "amx": False}}
TABLE = {
    "machine": EPYC,
    "date": "2026-11-27T22:40:00Z",
    "command": "python -m bench model-costs",
    "settings": {
        "batch_size": 8,
        "grad_accum": 1,
        "max_length": 256,
        "precision": "fp32",
        "lora_r": 16,
        "data": "assets/demo_support.jsonl",
    },
    "models": {
        "Qwen/Qwen3-0.6B": {
            "name": "Qwen3 0.6B",
            "params": 600_000_000,
            "training": {
                "tunedesk": {"tokens_per_s": 160.0, "peak_memory_gib": 4.5},
                "seed": {"tokens_per_s": 50.0, "peak_memory_gib": 7.2},
                "tokens_per_example": 100.0,
            },
            "serving": {"decode_tokens_per_s": 21.06},
            "errors": {},
        },
        "HuggingFaceTB/SmolLM2-135M-Instruct": {
            "name": "SmolLM2 135M Instruct",
            "params": 135_000_000,
            "training": {"tunedesk": {"tokens_per_s": 900.0, "peak_memory_gib": 1.2}},
            "serving": {},
            "errors": {"serving": "conversion failed: no converter"},
        },
    },
}


def _cfg(model: str, budget_s: float = 600) -> RunConfig:
    cfg = RunConfig()
    cfg.model.name, cfg.train.time_budget_s, cfg.train.batch_size = model, budget_s, 8
    cfg.data.path, cfg.data.max_length = "assets/demo_support.jsonl", 256
    return cfg


def test_a_catalog_model_gets_its_measured_figures_and_the_steps_its_budget_holds(home):
    text = cost_text(_cfg("Qwen/Qwen3-0.6B"), TABLE, EPYC)
    assert "Measured cost of Qwen3 0.6B" in text and "AMD EPYC, 2 cores, AVX2 only" in text
    assert "on 2026-11-27" in text and "training 160 tokens/s, peak memory 4.5 GiB" in text
    # 600 s x 160 tokens/s over 8 rows of 100 tokens a step
    assert "the 10-minute budget holds about 120 steps of 800 tokens" in text
    assert "llama-server decodes 21.1 tokens/s for one client at Q8_0" in text
    assert "not the one measured" not in text


def test_another_cpu_is_told_the_figures_are_from_elsewhere(home):
    xeon = {
        "cpu": "Intel Xeon",
        "cores": 16,
        "flags": {"avx2": True, "avx512_bf16": True, "amx": True},
    }
    text = cost_text(_cfg("qwen/qwen3-0.6b"), TABLE, xeon)
    assert (
        "⚠️ This machine (Intel Xeon, 16 cores, AVX2, AVX512-BF16, AMX) is not the one measured"
        in text
    )
    assert "training 160 tokens/s" in text  # still quoted, with the warning


def test_a_model_the_table_lacks_gets_nothing_and_a_missing_figure_its_reason(home):
    assert cost_text(_cfg("some-org/custom-model"), TABLE, EPYC) == ""
    assert cost_text(_cfg("Qwen/Qwen3-0.6B"), {}, EPYC) == ""
    text = cost_text(_cfg("default", budget_s=0), TABLE, EPYC)  # the default's aliases find its row
    assert "Measured cost of SmolLM2 135M Instruct" in text and "budget" not in text
    assert "Serving not measured (conversion failed: no converter)" in text
    assert "Measured cost of SmolLM2" in cost_text(
        _cfg("/some/folder"), TABLE, EPYC, name="HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def test_this_machines_own_speed_record_sizes_the_budget_instead(home):
    from finetune.train import speed_record

    cfg = _cfg("Qwen/Qwen3-0.6B")
    speed_record.save(
        cfg, Measured(startup_s=20, step_s=5, val_batch_s=1, val_batches=4), "dry run", 8, "cpu"
    )
    text = cost_text(cfg, TABLE, EPYC)
    assert (
        "from this machine's own measurement of these settings" in text
        and "holds about" not in text
    )
