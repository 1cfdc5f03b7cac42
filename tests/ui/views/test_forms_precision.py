"""The Train tab's default precision follows the device: bf16 on Ampere+, fp16 before, fp32 on CPU."""

from core import hardware
from ui.views.forms import default_precision


def _machine(bf16_off: str | None) -> hardware.Hardware:
    gpu = hardware.DeviceInfo("cuda:0", "a GPU", 16.0, {"fp32": None, "fp16": None, "bf16": bf16_off},
                              {"none": None, "8bit": None, "4bit": None})
    return hardware.Hardware(devices=[hardware._cpu_info(None), gpu], cpu_threads=2, bitsandbytes=None)


def test_default_precision_per_device():
    ampere, turing = _machine(None), _machine("bf16 needs an Ampere or newer GPU (compute 8.0+)")
    assert default_precision(ampere, "auto") == "bf16" and default_precision(ampere, "cpu") == "fp32"
    assert default_precision(turing, "cuda:0") == "fp16"
    cpu_only = hardware.Hardware(devices=[hardware._cpu_info(None)], cpu_threads=2, bitsandbytes=None)
    assert default_precision(cpu_only, "auto") == "fp32"
