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
