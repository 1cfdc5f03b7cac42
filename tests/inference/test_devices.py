"""inference/devices.py: the chat's dtype on GPUs, with fake device properties."""

from types import SimpleNamespace

import pytest
import torch

from inference.devices import pick_dtype


@pytest.mark.parametrize(("major", "dtype"), [(7, "float32"), (8, "bfloat16"), (9, "bfloat16")])
def test_auto_serves_bf16_only_where_the_gpu_computes_it_natively(major, dtype, monkeypatch):
    # torch.cuda.is_bf16_supported() says yes on a T4/V100 (emulated): it must not decide.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(major=major, minor=0)
    )
    assert pick_dtype("auto", "cuda:0") == dtype
    assert pick_dtype("float16", "cuda:0") == "float16"  # an explicit choice stands


def test_auto_on_cpu_is_the_dtype_the_measurement_found_faster(monkeypatch):
    import inference.devices as devices

    rates = devices.cpu_decode_rates()  # the real probe on this CPU
    assert set(rates) == {"float32", "bfloat16"}
    assert all(set(r) == {1, 16} and all(v > 0 for v in r.values()) for r in rates.values())
    faster = (
        "bfloat16"
        if (
            rates["bfloat16"][1] >= devices.BF16_MARGIN * rates["float32"][1]
            and rates["bfloat16"][16] >= rates["float32"][16]
        )
        else "float32"
    )
    assert pick_dtype("auto", "cpu") == faster
    reason = devices.dtype_reason("auto", "cpu", faster)
    assert f"{rates['bfloat16'][1] / rates['float32'][1]:.2f}x fp32 for one row" in reason
    assert f"{rates['bfloat16'][16] / rates['float32'][16]:.2f}x for 16 rows" in reason

    def measured(one: float, batch: float):  # bf16's rates against fp32's 10 at both sizes
        monkeypatch.setattr(
            devices,
            "cpu_decode_rates",
            lambda: {"float32": {1: 10.0, 16: 10.0}, "bfloat16": {1: one, 16: batch}},
        )
        return pick_dtype("auto", "cpu")

    # Flags do not decide: the same CPU answers fp32 when bf16 measures slower, bf16 when faster.
    assert measured(9.0, 20.0) == "float32"
    assert measured(19.0, 20.0) == "bfloat16"
    # One row faster but a batch slower (2 EPYC cores without AVX512-BF16: 1.23x and 0.21x):
    # the batching scheduler serves batches, so fp32.
    assert measured(12.3, 2.1) == "float32"
    assert pick_dtype("float32", "cpu") == "float32"  # an explicit choice stands
