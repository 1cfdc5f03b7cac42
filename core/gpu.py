"""CUDA specifics in one place: native bf16, TF32, free memory, out-of-memory, the fp16 scaler.

Everything here runs on a CPU-only machine too (it answers "no GPU" rather than failing), so
the decisions can be tested with fake device properties.
"""

from __future__ import annotations

import gc
import importlib.util

GIB = 2**30
# cuBLAS/cuDNN report a failed workspace allocation as a plain RuntimeError, not as
# torch.OutOfMemoryError; these are the words they use.
_OOM_WORDS = (
    "CUDA out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
)


def bf16_native(props) -> bool:
    """Whether a GPU computes bf16 in hardware (Ampere, compute 8.0, or newer).

    ``torch.cuda.is_bf16_supported()`` also says yes on a T4 or V100, where bf16 is emulated
    and slower than fp16; this is the stricter test.
    """

    return props.major >= 8


def cuda_index(device: str) -> int:
    """``"cuda"`` -> 0, ``"cuda:3"`` -> 3."""
    _, _, index = device.partition(":")
    return int(index) if index else 0


def cuda_bf16_native(device: str = "cuda") -> bool:
    import torch

    return bf16_native(torch.cuda.get_device_properties(cuda_index(device)))


def recommended_precision(dev) -> str:
    """The fastest precision that trains safely on a ``hardware.DeviceInfo``.

    bf16 on Ampere or newer GPUs; fp16 (with a gradient scaler) on older ones; on the CPU bf16
    where a short measurement finds its products clearly faster (native AVX512-BF16 or AMX),
    else fp32 (fp16 cannot run on a CPU; emulated bf16 is several times slower).
    """
    if not dev.name.startswith("cuda"):
        from core.cpu_precision import cpu_trains_faster_in_bf16

        return "bf16" if cpu_trains_faster_in_bf16() else "fp32"
    for precision in ("bf16", "fp16"):
        if dev.precisions.get(precision, "unknown") is None:
            return precision
    return "fp32"


def use_device(device: str) -> None:
    """Make ``cuda:N`` the current device, and let fp32 matmuls use TF32 on it.

    Without ``set_device`` libraries that allocate on "the current device" (bitsandbytes,
    ``torch.cuda.empty_cache``, NCCL) use GPU 0 while the model sits on GPU N. TF32 keeps fp32
    weights and optimizer state but runs the matmuls on tensor cores (about 8x the plain fp32
    rate on an A100, with a relative error near 3e-4, far below LoRA training noise).
    """
    import torch

    if not device.startswith("cuda"):
        return
    torch.cuda.set_device(cuda_index(device))
    torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls


def free_memory_gib(device: str) -> float | None:
    """GiB free on a CUDA device now (other processes' use subtracted); None for the CPU."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(cuda_index(device))
    return free / GIB


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` is running out of GPU memory, however the library worded it."""
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(w in str(err) for w in _OOM_WORDS)


def release_memory(device: str) -> None:
    """Hand cached blocks back after an out-of-memory error.

    Call it *after* leaving the ``except`` block: the exception's traceback holds the failed
    step's frames and through them its activations, so freeing inside the block frees nothing.
    """
    import torch

    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def make_scaler(device: str, precision: str):
    """A gradient scaler for fp16 on CUDA (fp16 gradients underflow without one), else None."""
    import torch

    if precision == "fp16" and device.startswith("cuda"):
        return torch.amp.GradScaler("cuda")
    return None


def attention_implementation(device: str, precision: str) -> str | None:
    """``flash_attention_2`` for fp16/bf16 on CUDA when the flash-attn package is installed.

    Packed rows then attend through ``cu_seqlens`` (no mask at all); otherwise transformers'
    default (sdpa) builds a dense block-diagonal mask. None means "the default".
    """
    if not device.startswith("cuda") or precision not in ("bf16", "fp16"):
        return None
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else None
