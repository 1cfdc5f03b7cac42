"""adapters/devices.py: the chat's dtype on GPUs, with fake device properties."""

from types import SimpleNamespace

import pytest
import torch

from adapters.devices import pick_dtype


@pytest.mark.parametrize(("major", "dtype"), [(7, "float32"), (8, "bfloat16"), (9, "bfloat16")])
def test_auto_serves_bf16_only_where_the_gpu_computes_it_natively(major, dtype, monkeypatch):
    # torch.cuda.is_bf16_supported() says yes on a T4/V100 (emulated): it must not decide.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(major=major, minor=0))
    assert pick_dtype("auto", "cuda:0") == dtype
    assert pick_dtype("float16", "cuda:0") == "float16"  # an explicit choice stands


def test_auto_on_cpu_is_the_dtype_the_measurement_found_faster(monkeypatch):
    import adapters.devices as devices

    rates = devices.cpu_decode_rates()  # the real probe on this CPU
    assert set(rates) == {"float32", "bfloat16"} and all(r > 0 for r in rates.values())
    faster = "bfloat16" if rates["bfloat16"] >= devices.BF16_MARGIN * rates["float32"] else "float32"
    assert pick_dtype("auto", "cpu") == faster
    assert f"{rates['bfloat16'] / rates['float32']:.2f}x" in devices.dtype_reason("auto", "cpu", faster)
    # Flags do not decide: the same CPU answers fp32 when bf16 measures slower, and bf16 when faster.
    monkeypatch.setattr(devices, "cpu_decode_rates", lambda: {"float32": 10.0, "bfloat16": 9.0})
    assert pick_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(devices, "cpu_decode_rates", lambda: {"float32": 10.0, "bfloat16": 19.0})
    assert pick_dtype("auto", "cpu") == "bfloat16"
    assert pick_dtype("float32", "cpu") == "float32"  # an explicit choice stands
