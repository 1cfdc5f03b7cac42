"""gpu-check's chat and compare rows, run on the CPU with an adapter the suite's row trained."""

from pathlib import Path

from bench.gpucheck.cases import train_row
from bench.gpucheck.chat import run_row

DATA = str(Path(__file__).resolve().parents[3] / "assets" / "demo_support.jsonl")


def test_chat_and_compare_rows_answer_with_the_trained_adapter(tiny_llama_dir, home):
    trained = train_row(
        "fp32-tf32", str(tiny_llama_dir), DATA, steps=2, batch=4, max_length=48, device="cpu"
    )
    spec = {"model": str(tiny_llama_dir), "adapter": trained["adapter"], "device": "cpu"}
    chat = run_row({**spec, "kind": "chat"})
    both = run_row({**spec, "kind": "compare"})
    assert chat["passed"] and chat["on_device"] and chat["tokens_per_s"] > 0 and chat["answer"]
    assert both["passed"] and both["tokens_per_s"] > 0 and both["peak_memory_gib"] is None
