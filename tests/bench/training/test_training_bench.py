"""`python -m bench training` on tiny models: the grid, the rows, the files, the counts."""

import csv
import json
import math
import shutil

import pytest
import torch

from bench.training.grid import BenchArgs, Grid, Point, expand_grid, model_flops, parse_list
from bench.training.maxbatch import find_max_batch, search_max_batch
from bench.training.results import COLUMNS, records
from core.hardware import DeviceInfo, Hardware


def _cpu_only_machine() -> Hardware:
    no_bnb = "4/8-bit quantization needs bitsandbytes (pip install bitsandbytes)"
    cpu = DeviceInfo(
        "cpu",
        "CPU",
        8.0,
        precisions={"fp32": None, "fp16": "fp16 needs a CUDA GPU", "bf16": None},
        quantizations={"none": None, "8bit": no_bnb, "4bit": no_bnb},
    )
    return Hardware(devices=[cpu], cpu_threads=2, bitsandbytes=None)


def test_parse_list_splits_converts_and_names_bad_items():
    assert parse_list("4, 8,4", int) == [4, 8]
    assert parse_list("cpu,cuda") == ["cpu", "cuda"]
    with pytest.raises(ValueError, match="'x' in '4,x'"):
        parse_list("4,x", int)
    with pytest.raises(ValueError, match="empty"):
        parse_list(" , ")


def test_grid_is_a_cartesian_product_with_skips_and_reasons():
    grid = Grid(
        device=["cpu", "cuda"],
        batch=[2, 4],
        accum=[1],
        precision=["fp32", "fp16"],
        quantization=["none", "4bit"],
        recipe=["seed", "tunedesk"],
    )
    points, skipped = expand_grid(BenchArgs(), grid, _cpu_only_machine())
    assert len(points) + len(skipped) == 2 * 2 * 2 * 2 * 2
    assert [p.name for p in points] == [
        "seed/cpu/b2x1/fp32/none",
        "tunedesk/cpu/b2x1/fp32/none",
        "seed/cpu/b4x1/fp32/none",
        "tunedesk/cpu/b4x1/fp32/none",
    ]
    reasons = {p.name: why for p, why in skipped}
    assert any("needs a CUDA GPU" in r for r in reasons["seed/cuda/b2x1/fp32/none"])
    assert any("bitsandbytes" in r for r in reasons["seed/cpu/b2x1/fp32/4bit"])
    assert any("fp16" in r for r in reasons["tunedesk/cpu/b4x1/fp16/none"])
    with pytest.raises(ValueError, match="unknown recipe"):
        expand_grid(BenchArgs(), Grid(recipe=["trainer"]), _cpu_only_machine())


def test_flops_formula_and_speedup_over_the_matching_seed_row():
    shape = {
        "body_params": 10,
        "lora_params": 2,
        "head_params": 5,
        "layers": 3,
        "attention_width": 4,
    }
    assert (
        model_flops(shape, real_tokens=7, head_positions=3, causal_pairs=11)
        == 4 * 10 * 7 + 6 * 2 * 7 + 4 * 5 * 3 + 12 * 3 * 4 * 11
    )
    base = {
        "examples": 4,
        "real_tokens": 100,
        "seconds": 1.0,
        "peak_memory_gib": 1.0,
        "final_loss": 2.0,
        "timed_steps": 1,
        "packing": False,
        "logit_positions": 100,
        "response_val_loss": None,
        "model_flops": 1e12,
        "token_flops": 1.2e12,
    }
    rows = [
        {**base, "point": Point("cpu", 2, 1, "fp32", "none", "seed"), "real_tokens_per_s": 100.0},
        {**base, "point": Point("cpu", 4, 1, "fp32", "none", "seed"), "real_tokens_per_s": 200.0},
        {
            **base,
            "point": Point("cpu", 4, 1, "fp32", "none", "tunedesk"),
            "real_tokens_per_s": 500.0,
        },
        {
            **base,
            "point": Point("cpu", 8, 1, "fp32", "none", "tunedesk"),
            "real_tokens_per_s": 300.0,
        },
        {"point": Point("cpu", 16, 1, "fp32", "none", "tunedesk"), "error": "out of memory"},
    ]
    recs = records(rows, {"cpu": 2.0})
    assert [r["speedup_vs_seed"] for r in recs] == [
        1.0,
        1.0,
        2.5,
        3.0,
        None,
    ]  # b8 has no seed twin: first seed
    assert recs[0]["mfu"] == pytest.approx(0.5)  # 1 TFLOP in 1 s on a 2 TFLOP/s device
    assert recs[0]["token_mfu"] == pytest.approx(0.6)  # the head counted on every real token


def test_rounds_run_the_grid_in_turn_and_report_median_rounds_and_per_round_speedups(monkeypatch):
    from bench.training import grid
    from bench.training.results import markdown

    speeds = iter([100.0, 210.0, 90.0, 150.0, 110.0, 250.0])  # seed, tunedesk, seed, tunedesk, ...
    order = []

    def measured(job, device, threads, timeout=None):
        order.append(job["point"]["recipe"])
        speed = next(speeds)
        return {
            "examples": 4,
            "real_tokens": 100,
            "seconds": 100 / speed,
            "peak_memory_gib": 1.0,
            "final_loss": 2.0,
            "timed_steps": 1,
            "packing": False,
            "logit_positions": 100,
            "response_val_loss": None,
            "model_flops": 1e12,
            "real_tokens_per_s": speed,
        }

    monkeypatch.setattr(grid, "run_isolated", measured)
    points = [
        Point("cpu", 8, 1, "fp32", "none", "seed"),
        Point("cpu", 8, 1, "fp32", "none", "tunedesk"),
    ]
    rows = grid.run_grid(BenchArgs(), points, rounds=3)
    assert order == ["seed", "tunedesk"] * 3
    assert [r["real_tokens_per_s"] for r in rows] == [100.0, 210.0]  # each row's median round
    assert rows[1]["round_tokens_per_s"] == [210.0, 150.0, 250.0]
    seed, tuned = records(rows)
    assert (
        tuned["speedup_rounds"] == [2.1, 1.67, 2.27] and tuned["speedup_vs_seed"] == 2.1
    )  # median of the ratios
    report = markdown([seed, tuned], [], {}, "s")
    assert "- rounds, tunedesk/cpu/b8x1/fp32/none: 210 / 150 / 250 real tokens/s" in report
    assert grid.median_round([{"error": "boom"}, {"error": "again"}])["round_tokens_per_s"] == [
        None,
        None,
    ]
    assert (
        grid.median_round([{"error": "boom"}, {"real_tokens_per_s": 5.0}])["real_tokens_per_s"]
        == 5.0
    )


def test_search_max_batch_finds_the_threshold_in_few_tries():
    for threshold in [*range(0, 70), 1000, 4095, 4096]:
        tried = []

        def fits(b, t=threshold, log=tried):
            log.append(b)
            return b <= t

        assert search_max_batch(fits) == min(threshold, 4096)
        assert len(tried) <= 2 * max(1, math.ceil(math.log2(max(threshold, 2)))) + 2
    assert search_max_batch(lambda b: True, limit=100) == 100
    assert search_max_batch(lambda b: False) == 0


def test_find_max_batch_on_the_cpu_says_it_needs_a_gpu(tiny_llama_dir, home, capsys):
    from bench.__main__ import main
    from finetune.config import RunConfig

    cfg = RunConfig()
    cfg.train.device = "cpu"
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        find_max_batch(cfg)
    assert (
        main(["training", "--find-max-batch", "--device", "cpu", "--model", str(tiny_llama_dir)])
        == 2
    )
    out = capsys.readouterr()
    assert "needs a CUDA GPU" in out.out and "Traceback" not in out.err


def test_counter_counts_real_tokens_pairs_and_logit_positions(tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    from bench.training.measure import TokenCounter

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    counter = TokenCounter(model)
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    model(input_ids=ids, attention_mask=(ids != 0).long())  # padded: 3 + 2 real tokens
    assert counter.read() == {"real": 5, "examples": 2, "pairs": 6 + 3, "logits": 8}
    model(
        input_ids=torch.tensor([[5, 6, 7, 8, 9]]), position_ids=torch.tensor([[0, 1, 2, 0, 1]])
    )  # packed
    assert counter.read() == {"real": 10, "examples": 4, "pairs": 18, "logits": 13}


def test_two_row_run_writes_csv_markdown_and_plot(tiny_llama_dir, home, tmp_path):
    from bench.__main__ import main

    out = tmp_path / "bench"
    rc = main(
        [
            "training",
            "--model",
            str(tiny_llama_dir),
            "--device",
            "cpu",
            "--recipe",
            "seed,tunedesk",
            "--batch-size",
            "2",
            "--max-steps",
            "3",
            "--max-length",
            "64",
            "--max-samples",
            "16",
            "--threads",
            "1",
            "--val-rows",
            "2",
            "--matmul-rate",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    with open(out / "results.csv") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        seed, tuned = list(reader)
    assert (seed["recipe"], tuned["recipe"]) == ("seed", "tunedesk")
    for row in (seed, tuned):
        assert (
            float(row["real_tokens_per_s"]) > 0
            and float(row["peak_memory_gib"]) > 0
            and not row["error"]
        )
        assert int(row["examples"]) == 2 and float(row["mfu"]) > 0
        assert math.isfinite(float(row["final_loss"])) and math.isfinite(
            float(row["response_val_loss"])
        )
    assert float(seed["speedup_vs_seed"]) == 1.0 and float(tuned["speedup_vs_seed"]) > 0
    # The seed recipe runs the LM head on every position, padding included; TuneDesk on labels only.
    assert int(seed["logit_positions"]) == int(seed["examples"]) * 64
    assert int(tuned["logit_positions"]) < int(tuned["real_tokens"])
    # Issue 8's per-token measure counts the head on every real token: equal for the seed row,
    # higher than the FLOPs TuneDesk actually does.
    assert float(seed["token_mfu"]) == pytest.approx(float(seed["mfu"]), rel=1e-3)
    assert float(tuned["token_mfu"]) > float(tuned["mfu"])
    report = (out / "report.md").read_text()
    assert "| seed/cpu/b2x1/fp32/none |" in report and "speed-up" in report
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "results.json").read_text())["args"]["max_length"] == 64


def _weightless_copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix not in (".safetensors", ".bin"):
            shutil.copy(f, dst / f.name)
    return dst


def test_model_from_config_reads_no_weight_file(tiny_llama_dir, home, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from bench.training.recipes import measure

    folder = _weightless_copy(tiny_llama_dir, tmp_path / "no-weights")

    def refuse(*a, **k):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
    args = BenchArgs(
        model=str(folder),
        model_from_config=True,
        max_steps=3,
        max_length=64,
        max_samples=16,
        val_rows=2,
    )
    for recipe in ("tunedesk", "seed"):
        row = measure(args, Point("cpu", 2, 1, "fp32", "none", recipe))
        assert row["real_tokens"] > 0 and row["seconds"] > 0 and math.isfinite(row["final_loss"])
    # --config-json: the architecture from that file (here 1 layer), the tokenizer from --model.
    config = json.loads((folder / "config.json").read_text())
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    one_layer = measure(
        BenchArgs(**{**args.__dict__, "config_json": str(tmp_path / "cfg" / "config.json")}),
        Point("cpu", 2, 1, "fp32", "none", "seed"),
    )
    assert one_layer["model_flops"] < row["model_flops"] and one_layer["logit_positions"] == 2 * 64


def test_too_few_steps_for_the_warm_up_is_refused(tiny_llama_dir, home, capsys):
    from bench.__main__ import main

    assert main(["training", "--model", str(tiny_llama_dir), "--max-steps", "2"]) == 2
    assert "no timed step" in capsys.readouterr().err
