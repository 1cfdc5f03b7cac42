"""The Train tab's default precision follows the device: bf16 on Ampere+, fp16 before; on a CPU
bf16 only where its products were measured clearly faster than fp32."""

import pytest

from core import cpu_precision, hardware
from ui.views.forms import default_precision


def _machine(bf16_off: str | None) -> hardware.Hardware:
    gpu = hardware.DeviceInfo(
        "cuda:0",
        "a GPU",
        16.0,
        {"fp32": None, "fp16": None, "bf16": bf16_off},
        {"none": None, "8bit": None, "4bit": None},
    )
    return hardware.Hardware(
        devices=[hardware._cpu_info(None), gpu], cpu_threads=2, bitsandbytes=None
    )


@pytest.fixture(autouse=True)
def cpu_without_fast_bf16(monkeypatch):
    monkeypatch.setattr(
        cpu_precision, "training_matmul_rates", lambda: {"fp32": 200.0, "bf16": 30.0}
    )


def test_default_precision_per_device():
    ampere, turing = _machine(None), _machine("bf16 needs an Ampere or newer GPU (compute 8.0+)")
    assert (
        default_precision(ampere, "auto") == "bf16" and default_precision(ampere, "cpu") == "fp32"
    )
    assert default_precision(turing, "cuda:0") == "fp16"
    cpu_only = hardware.Hardware(
        devices=[hardware._cpu_info(None)], cpu_threads=2, bitsandbytes=None
    )
    assert default_precision(cpu_only, "auto") == "fp32"


def test_a_cpu_with_fast_bf16_defaults_to_it(monkeypatch):
    monkeypatch.setattr(
        cpu_precision, "training_matmul_rates", lambda: {"fp32": 200.0, "bf16": 420.0}
    )
    cpu_only = hardware.Hardware(
        devices=[hardware._cpu_info(None)], cpu_threads=2, bitsandbytes=None
    )
    assert default_precision(cpu_only, "auto") == "bf16"
