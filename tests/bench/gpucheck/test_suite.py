"""`python -m bench gpu-check`: the suite's plumbing on the CPU, the suite itself on a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.gpucheck import cases as gpucheck_rows
from bench.gpucheck import suite as gpucheck
from bench.gpucheck.suite import CheckArgs, RowResult, markdown, run_child, run_suite, save

ROOT = Path(__file__).resolve().parents[3]
DATA = str(ROOT / "assets" / "demo_support.jsonl")


def test_steady_rate_leaves_out_the_first_step():
    # 100 tokens per step; step 1 took 5 s (kernel selection), steps 2-3 one second each.
    start = 0.0
    events = [
        {"time": 5.0, "tokens_per_second": 100 / 5},
        {"time": 7.0, "tokens_per_second": 300 / 7},
    ]
    assert gpucheck_rows.steady_rate(start, events) == pytest.approx(100.0)


def test_a_training_row_measures_a_real_run_on_the_cpu(tiny_llama_dir, home):
    out = gpucheck_rows.train_row(
        "fp32-tf32", str(tiny_llama_dir), DATA, steps=3, batch=4, max_length=64, device="cpu"
    )
    assert out["passed"] and out["tokens_per_s"] > 0 and 0 < out["mfu"] < 1
    assert out["peak_memory_gib"] > 0 and out["loss_last"] < out["loss_first"] + 1
    assert (home / "adapters" / out["adapter"] / "manifest.json").is_file()


def test_a_failing_row_comes_back_as_failed_with_its_error(tiny_llama_dir, home):
    # The max-batch finder refuses the CPU with a sentence; the child's error reaches the row.
    out = run_child(
        {"kind": "max-batch", "model": str(tiny_llama_dir), "data": DATA, "max_length": 32}, 120
    )
    assert out["passed"] is False and "needs a CUDA GPU" in out["error"]


def test_a_hanging_row_is_cut_off_with_every_thread_s_stack(monkeypatch):
    monkeypatch.setattr(gpucheck, "_PROJECT_ROOT", ROOT)
    code = "import time; time.sleep(60)"
    spec = {"kind": "train", "name": "bf16"}
    monkeypatch.setattr(sys, "executable", sys.executable)
    # A row that sleeps past its limit: the watchdog dumps the stacks, the parent reports it.
    real_run = subprocess.run

    def sleepy(cmd, **kw):
        return real_run(
            [
                cmd[0],
                "-c",
                cmd[2]
                .replace("import bench.gpucheck.suite as m;", code + ";")
                .replace(" print(json", " print(json"),
                cmd[3],
            ],
            **kw,
        )

    monkeypatch.setattr(subprocess, "run", sleepy)
    out = run_child(spec, timeout=15)
    assert out["passed"] is False and "Timeout" in out["error"]


def test_rows_that_build_on_a_failed_row_are_skipped_not_run(monkeypatch):
    calls = []
    monkeypatch.setattr(
        gpucheck,
        "run_child",
        lambda spec, timeout: calls.append(spec) or {"passed": False, "error": "boom"},
    )
    results = run_suite(CheckArgs(model="m"), rows=("bf16", "forced-oom", "chat", "compare"))
    assert [r.passed for r in results] == [False] * 4 and len(calls) == 1
    assert all("skipped" in r.error for r in results[1:])


def test_forced_oom_passes_only_when_a_retry_happened(monkeypatch):
    answers = iter(
        [
            {
                "passed": True,
                "tokens_per_s": 1.0,
                "peak_memory_gib": 4.0,
                "mfu": 0.1,
                "adapter": "a",
            },
            {
                "passed": True,
                "tokens_per_s": 1.0,
                "peak_memory_gib": 2.0,
                "mfu": 0.1,
                "oom_retries": [],
            },
        ]
    )
    specs = []
    monkeypatch.setattr(
        gpucheck, "run_child", lambda spec, timeout: specs.append(spec) or next(answers)
    )
    bf16, oom = run_suite(CheckArgs(model="m"), rows=("bf16", "forced-oom"))
    assert bf16.passed and not oom.passed and "no out-of-memory retry" in oom.error
    assert specs[1]["memory_limit_gib"] == pytest.approx(gpucheck.OOM_SHARE * 4.0)


def test_report_and_files(tmp_path):
    rows = [
        RowResult("bf16", True, 1234.5, 2.5, 0.31, 9.0, {"adapter": "a"}),
        RowResult(
            "forced-oom",
            True,
            99.0,
            1.0,
            0.1,
            5.0,
            {"oom_retries": [{"step": 0, "micro_batch": 32}]},
        ),
        RowResult("chat", False, error="exit code 1: RuntimeError: x"),
    ]
    text = markdown(rows)
    assert (
        "| bf16 | passed | 1,234 | 2.50 | 31.0% |" in text
        and "micro-batch 32 after 1 OOM retries" in text
    )
    assert (
        "| chat | **failed** | — |" in text and "- **chat**: exit code 1: RuntimeError: x" in text
    )
    save(rows, tmp_path)
    assert [r["name"] for r in json.loads((tmp_path / "results.json").read_text())] == [
        "bf16",
        "forced-oom",
        "chat",
    ]
    assert (tmp_path / "report.md").read_text().startswith("| check |")


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU"
)
def test_the_command_refuses_without_a_gpu_in_one_sentence():
    out = subprocess.run(
        [sys.executable, "-m", "bench", "gpu-check"], capture_output=True, text=True, cwd=ROOT
    )
    assert (
        out.returncode == 2 and "needs a CUDA GPU" in out.stdout and "Traceback" not in out.stderr
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none here")
def test_gpu_check_passes_every_row(tiny_llama_dir, home, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "gpu-check",
        "--model",
        str(tiny_llama_dir),
        "--data",
        DATA,
        "--batch-size",
        "8",
        "--max-length",
        "64",
        "--out",
        str(tmp_path),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    results = json.loads((tmp_path / "results.json").read_text())
    assert out.returncode == 0, out.stdout[-4000:]
    assert [r["name"] for r in results] == list(gpucheck.ROWS) and all(r["passed"] for r in results)


def test_the_time_budget_row_trains_until_its_budget_and_saves_within_it(
    tiny_llama_dir, home, monkeypatch
):
    import finetune.config

    monkeypatch.setattr(
        finetune.config, "BUDGET_RANGE_S", (10, 60)
    )  # the product's floor is 30 s: CI time
    out = gpucheck_rows.budget_row(
        str(tiny_llama_dir), DATA, batch="auto", max_length=64, seconds=10, device="cpu"
    )
    bought = out["budget"]
    assert out["passed"], out
    # the Train tab's batch: "auto", the default on the CPU (trial steps pick it on a GPU)
    assert out["batch"] == 8 and out["batch_auto"].endswith("on the CPU") and out["mfu"] > 0
    assert bought["seconds"] == 10 and bought["seconds_used"] <= 10 * 1.05 and bought["steps"] > 3
    assert out["lr_end"] <= 0.05 * 1e-3  # the schedule ran out with the budget
    assert (home / "adapters" / out["adapter"] / "manifest.json").is_file()


def test_the_train_tab_default_row_runs_the_first_run_then_the_release_checks(
    tiny_llama_dir, home, monkeypatch
):
    """The row a GPU session runs for issue 58's goal (the Train tab's 10-minute default, then
    right intent on held-out rows), here on the CPU with a tiny model and a short budget."""
    import finetune.config
    from bench.gpucheck.suite import _note

    monkeypatch.setattr(finetune.config, "BUDGET_RANGE_S", (10, 60))  # the floor is 30 s
    out = gpucheck_rows.default_run_row(
        str(tiny_llama_dir), DATA, seconds=15, device="cpu", eval_rows=12
    )
    assert out["passed"], out
    # the Train tab's settings on a CPU: batch auto = 8, at most 1,000 rows (5 % held out)
    assert out["batch"] == 8 and out["batch_auto"].endswith("on the CPU")
    assert out["train_rows"] == 950 and out["budget"]["steps"] > 0
    rates = out["right_intent"]
    assert out["adapter"] in rates and len(rates) == 2
    assert all(0.0 <= r <= 1.0 for r in rates.values())
    assert "right intent" in _note(out) and f"over {out['train_rows']} rows" in _note(out)
