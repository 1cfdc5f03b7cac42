"""The measured cost table: written and read back whole, refused when it is not one, the
machine read from /proc/cpuinfo, and its markdown."""

from __future__ import annotations

import json

import pytest

from core import model_costs

EPYC = (
    "processor\t: 0\n"
    "model name\t: AMD EPYC\n"
    "flags\t\t: fpu sse avx avx2 fma\n\n"
    "processor\t: 1\n"
    "model name\t: AMD EPYC\n"
)
XEON = (
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
)


def table() -> dict:
    return {
        "machine": model_costs.machine_info(EPYC),
        "date": "2026-11-27T22:40:00Z",
        "command": "python -m bench model-costs",
        "settings": {"batch_size": 8, "max_length": 256},
        "models": {
            "Qwen/Qwen3-0.6B": {
                "name": "Qwen3 0.6B",
                "params": 600_000_000,
                "training": {
                    "tunedesk": {"tokens_per_s": 123.4, "peak_memory_gib": 4.5},
                    "seed": {"tokens_per_s": 50.0, "peak_memory_gib": 7.25},
                },
                "serving": {"decode_tokens_per_s": 21.06},
                "errors": {},
            },
            "meta-llama/Llama-3.2-1B-Instruct": {
                "name": "Llama 3.2 1B Instruct",
                "params": 1_230_000_000,
                "training": {},
                "errors": {"tunedesk": "timed out after 900 s", "serving": "conversion failed: x"},
            },
        },
    }


def test_write_then_read_gives_the_same_table(tmp_path):
    path = model_costs.write(table(), tmp_path / "costs.json")
    back = model_costs.read(path)
    assert back.pop("format") == model_costs.FORMAT
    assert back == table()


def test_read_refuses_what_is_not_a_cost_table(tmp_path):
    path = tmp_path / "x.json"
    assert model_costs.read(path) is None  # missing
    path.write_text("{not json")
    assert model_costs.read(path) is None
    path.write_text(json.dumps({"models": {}}))  # no format mark
    assert model_costs.read(path) is None
    with pytest.raises(ValueError, match="needs date"):
        model_costs.write({k: v for k, v in table().items() if k != "date"}, path)


def test_machine_flags_from_cpuinfo():
    epyc, xeon = model_costs.machine_info(EPYC), model_costs.machine_info(XEON)
    assert epyc["cpu"] == "AMD EPYC" and epyc["flags"] == {
        "avx2": True,
        "avx512_bf16": False,
        "amx": False,
    }
    assert xeon["flags"] == {"avx2": True, "avx512_bf16": True, "amx": True}
    assert (
        model_costs.describe_machine({**epyc, "cores": 2})
        == "AMD EPYC, 2 cores, AVX2 only (no AVX512-BF16, no AMX)"
    )
    assert not model_costs.same_machine(epyc, xeon) and model_costs.same_machine(epyc, dict(epyc))


def test_markdown_has_a_row_per_model_with_the_reasons_for_missing_figures():
    lines = model_costs.markdown(table()).splitlines()
    assert len(lines) == 4
    assert "| 123 | 4.50 | 50 | 7.25 | 21.1 |" in lines[2]
    assert "| — | — | — | — | — |" in lines[3] and "tunedesk: timed out after 900 s" in lines[3]
