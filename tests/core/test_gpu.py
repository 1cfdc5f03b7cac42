"""core/gpu.py: CUDA decisions checked with fake device properties, on the CPU."""

from types import SimpleNamespace

import pytest
import torch

from core import gpu, hardware
from finetune.train.steps import optimizer_step

GIB = 2**30
CARDS = {  # name: (major, minor, memory GiB)
    "Tesla T4": (7, 5, 15),
    "Tesla V100-SXM2-32GB": (7, 0, 32),
    "NVIDIA A100-SXM4-80GB": (8, 0, 80),
    "NVIDIA H100 80GB HBM3": (9, 0, 80),
}


def fake_props(name: str):
    major, minor, mem = CARDS[name]
    return SimpleNamespace(name=name, major=major, minor=minor, total_memory=mem * GIB)


@pytest.mark.parametrize(
    ("card", "native"),
    [
        ("Tesla T4", False),
        ("Tesla V100-SXM2-32GB", False),
        ("NVIDIA A100-SXM4-80GB", True),
        ("NVIDIA H100 80GB HBM3", True),
    ],
)
def test_only_ampere_and_newer_count_as_native_bf16(card, native):
    assert gpu.bf16_native(fake_props(card)) is native


@pytest.mark.parametrize(
    ("card", "precision"),
    [
        ("Tesla T4", "fp16"),
        ("Tesla V100-SXM2-32GB", "fp16"),
        ("NVIDIA A100-SXM4-80GB", "bf16"),
        ("NVIDIA H100 80GB HBM3", "bf16"),
    ],
)
def test_a_gpu_trains_in_half_precision_by_default(card, precision, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: fake_props(card))
    dev = hardware._cuda_info(0, bnb=None)
    assert gpu.recommended_precision(dev) == precision


@pytest.mark.parametrize(
    ("bf16_rate", "precision"), [(400.0, "bf16"), (250.0, "fp32"), (30.0, "fp32")]
)
def test_the_cpu_trains_in_bf16_only_where_measured_clearly_faster(
    bf16_rate, precision, monkeypatch
):
    from core import cpu_precision

    monkeypatch.setattr(
        cpu_precision, "training_matmul_rates", lambda: {"fp32": 200.0, "bf16": bf16_rate}
    )
    cpu = hardware._cpu_info(bnb=None)
    assert gpu.recommended_precision(cpu) == precision
    assert ("bf16" in cpu.warnings) == (
        precision == "fp32"
    )  # the Train tab says why bf16 is not the default
    if precision == "fp32":
        assert f"{bf16_rate / 200:.2f}x as fast as fp32" in cpu.warnings["bf16"]


def test_the_cpu_probe_measures_both_dtypes():
    from core import cpu_precision

    rates = cpu_precision.training_matmul_rates()
    assert set(rates) == {"fp32", "bf16"} and all(r > 0.1 for r in rates.values())  # GFLOP/s
    assert cpu_precision.cpu_trains_faster_in_bf16(rates) == (rates["bf16"] >= 1.5 * rates["fp32"])


@pytest.mark.parametrize(("screen_bf16", "probed"), [(3.0, False), (110.0, True), (400.0, True)])
def test_a_small_product_decides_alone_only_where_bf16_is_far_behind(
    screen_bf16, probed, monkeypatch
):
    """Emulated bf16 (AVX2 only) ran the full probe in 4.5-4.9 s per process; the small product
    answers there, and anywhere bf16 might reach the margin the full probe still decides."""
    from core import cpu_precision

    timed = []

    def rates(shape, repeats):
        timed.append(shape)
        return {
            "fp32": 200.0,
            "bf16": screen_bf16 if shape == cpu_precision.SCREEN_SHAPE else 420.0,
        }

    monkeypatch.setattr(cpu_precision, "matmul_rates", rates)
    cpu_precision.training_matmul_rates.cache_clear()
    try:
        got = cpu_precision.training_matmul_rates()
    finally:
        cpu_precision.training_matmul_rates.cache_clear()
    assert timed == [cpu_precision.SCREEN_SHAPE] + ([cpu_precision.PROBE_SHAPE] if probed else [])
    assert got["bf16"] == (420.0 if probed else screen_bf16)
    assert cpu_precision.cpu_trains_faster_in_bf16(got) == probed


def test_the_real_small_product_agrees_with_the_full_probe_where_it_decides():
    from core import cpu_precision

    screen = cpu_precision.matmul_rates(
        cpu_precision.SCREEN_SHAPE, repeats=cpu_precision.SCREEN_REPEATS
    )
    if screen["bf16"] >= cpu_precision.SCREEN_VERDICT * screen["fp32"]:
        pytest.skip(
            f"the quick screen does not rule bf16 out on this CPU ({screen}): the full probe "
            "decides, and this test checks only CPUs the screen rules out"
        )
    full = cpu_precision.matmul_rates(cpu_precision.PROBE_SHAPE, repeats=1)
    assert not cpu_precision.cpu_trains_faster_in_bf16(full), (screen, full)


def test_use_device_selects_the_gpu_and_turns_tf32_on(monkeypatch):
    chosen, before = [], torch.get_float32_matmul_precision()
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    try:
        torch.set_float32_matmul_precision("highest")
        gpu.use_device("cpu")
        assert chosen == [] and torch.get_float32_matmul_precision() == "highest"
        gpu.use_device("cuda:1")
        assert chosen == [1] and torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_single_process_training_on_cuda_n_sets_that_device(monkeypatch):
    from finetune.train.setup import dist_setup

    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert dist_setup("cuda:2") == (0, 1, "cuda:2") and chosen == [2]


def test_cublas_allocation_failures_count_as_out_of_memory():
    assert gpu.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert gpu.is_oom(
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    )
    assert not gpu.is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 9x8)"))
    assert not gpu.is_oom(ValueError("CUDA out of memory"))  # only runtime errors


def test_free_memory_is_none_on_the_cpu_and_reads_mem_get_info_on_a_gpu(monkeypatch):
    assert gpu.free_memory_gib("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (3 * GIB, 80 * GIB))
    assert gpu.free_memory_gib("cuda:1") == 3.0


def test_scaler_only_for_fp16_on_cuda():
    assert gpu.make_scaler("cpu", "fp16") is None and gpu.make_scaler("cuda", "bf16") is None
    assert isinstance(gpu.make_scaler("cuda:0", "fp16"), torch.amp.GradScaler)


def test_a_scaled_step_with_an_inf_gradient_is_skipped_and_the_scale_backs_off():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    before = [p.detach().clone() for p in model.parameters()]
    scaler.scale(model(torch.randn(3, 4)).sum()).backward()
    model.weight.grad[0, 0] = float("inf")  # an fp16 overflow
    optimizer_step(model, optimizer, scheduler, scaler, max_grad_norm=1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**9
    scaler.scale(model(torch.randn(3, 4)).sum()).backward()  # a finite step goes through
    optimizer_step(model, optimizer, scheduler, scaler, max_grad_norm=1.0)
    assert not torch.equal(before[0], model.weight)


def test_flash_attention_only_with_the_package_in_half_precision_on_cuda(monkeypatch):
    import importlib.util

    found = {"flash_attn": object()}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: found.get(name))
    assert gpu.attention_implementation("cuda:0", "bf16") == "flash_attention_2"
    assert gpu.attention_implementation("cuda:0", "fp32") is None
    assert gpu.attention_implementation("cpu", "bf16") is None
    found.clear()
    assert gpu.attention_implementation("cuda:0", "fp16") is None
