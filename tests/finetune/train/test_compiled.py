"""The training step through compiled decoder layers (``train.compile``), on the CPU.

A CPU run only compiles when asked (``auto`` stays eager there); these runs ask, so the same
code a GPU run takes by default runs here: inductor's C++ backend instead of Triton.
"""

import json

import pytest

from finetune.config import RunConfig, validate
from finetune.train import train
from finetune.train.compiled import wanted

WORDS = [
    "order",
    "refund",
    "parcel",
    "invoice",
    "account",
    "password",
    "delivery",
    "address",
    "payment",
    "card",
]


@pytest.fixture
def short_rows(tmp_path):
    """48 support rows of 2 to 25 words: batches grouped by length come in many lengths (the
    demo rows all fill a tiny model's max length)."""
    path = tmp_path / "short.jsonl"
    rows = [
        {
            "instruction": f"help with my {WORDS[i % 10]}",
            "response": " ".join(WORDS[(i + k) % 10] for k in range(2 + i // 2)),
        }
        for i in range(48)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(model_dir, data, compile_setting: str) -> RunConfig:
    cfg = RunConfig()
    cfg.model.name, cfg.data.path = str(model_dir), str(data)
    cfg.data.max_samples, cfg.data.max_length, cfg.data.val_fraction = 48, 200, 0.1
    cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout = 4, 8, 0.0  # no dropout: same maths both ways
    t = cfg.train
    t.max_steps, t.batch_size, t.log_every, t.eval_every, t.probe_every, t.save_every = (
        8,
        4,
        1,
        4,
        4,
        0,
    )
    t.learning_rate, t.compile = 5e-3, compile_setting
    return cfg


def _run(model_dir, data, setting):
    events = []
    result = train(_cfg(model_dir, data, setting), on_event=events.append)
    manifest = json.loads((result.adapter_dir / "manifest.json").read_text())
    return events, result, manifest["training"]


def test_a_compiled_run_trains_as_an_eager_one_with_a_few_graphs_for_every_length(
    tiny_llama_dir, short_rows, home
):
    eager_events, eager, eager_record = _run(tiny_llama_dir, short_rows, "off")
    events, result, record = _run(tiny_llama_dir, short_rows, "on")
    assert eager_record["compiled"] is False
    assert record["compiled"] is True and "compile_failed" not in record, record
    # Rows grouped by length: the steps ran on batches of many lengths, and compiling did not
    # follow each one: the first shapes, then the length symbolic, each twice (the first
    # layer's input needs no gradient, the others' do).
    assert record["step_shapes"] >= 6, record
    assert 1 <= record["compiled_graphs"] <= 4, record
    assert record["first_step_s"] > 0
    assert any("compiling the decoder layers included" in e.get("message", "") for e in events)
    progress = [e for e in events if e["type"] == "progress"]
    assert all(e["compile_s"] == pytest.approx(record["first_step_s"], abs=0.01) for e in progress)
    assert all("compile_s" not in e for e in eager_events if e["type"] == "progress")
    # Same losses step by step, same validation losses, same greedy probe answers (eval mode
    # runs the layers eagerly).
    losses = [e["loss"] for e in events if e["type"] == "progress"]
    eager_losses = [e["loss"] for e in eager_events if e["type"] == "progress"]
    assert losses == pytest.approx(eager_losses, rel=1e-3)
    assert result.metrics["val_loss"] == pytest.approx(eager.metrics["val_loss"], rel=1e-3)
    assert result.metrics["val_loss"] < result.metrics["base_val_loss"]
    probes = [e["answers"] for e in events if e["type"] == "probe"]
    eager_probes = [e["answers"] for e in eager_events if e["type"] == "probe"]
    assert len(probes) >= 2 and probes == eager_probes


def test_a_compiler_that_cannot_build_leaves_the_run_training_eagerly(
    tiny_llama_dir, short_rows, home, tmp_path, monkeypatch
):
    import torch._dynamo
    import torch._inductor.config as inductor

    torch._dynamo.reset()  # what an earlier test compiled in this process is not reused
    # No C++ compiler where inductor looks for one, and no kernels it built before.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.setattr(inductor.cpp, "cxx", (None, str(tmp_path / "no-such-compiler")))
    events, result, record = _run(tiny_llama_dir, short_rows, "on")
    assert record["compiled"] is False and record["compile_failed"], record
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert any("compiling the decoder layers failed, training eagerly" in w for w in warnings)
    assert result.steps == 8 and result.metrics["val_loss"] < result.metrics["base_val_loss"]


def test_compile_is_on_off_or_auto_and_auto_compiles_only_on_a_gpu():
    cfg = RunConfig()
    cfg.train.compile = "fast"
    assert any("compile must be one of auto, on, off (got 'fast')" in p for p in validate(cfg))
    assert not wanted("auto", "cpu")
    assert wanted("auto", "cuda:0") and wanted("on", "cpu") and not wanted("off", "cuda")
    assert not wanted("auto", "cuda", quantization="4bit")
    assert not wanted("auto", "cuda", sharding="fsdp")
