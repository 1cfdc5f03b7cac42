"""The benchmark's instruments: token counters on the model, a timing window, the device's
matmul rate, and the parameter counts the FLOPs formula (``bench.training.grid``) needs.

Counting happens in hooks on the model itself, so the seed and TuneDesk recipes are counted
identically whatever their batching: real (non-padding) tokens, examples, causal attention
pairs, and the positions the LM head actually ran on.
"""

from __future__ import annotations

import time

import torch


class TokenCounter:
    """Counts what the model really processes, via hooks (device tensors: no sync per batch).

    ``real``: non-padding input tokens; ``examples``: examples (packed rows count each one);
    ``pairs``: causal (query, key) pairs inside examples, sum of n(n+1)/2; ``logits``: positions
    the LM head ran on.
    """

    def __init__(self, model):
        self.totals = {"real": 0, "examples": 0, "pairs": 0, "logits": 0}
        self._handles = [model.register_forward_pre_hook(self._inputs, with_kwargs=True)]

    def _inputs(self, module, args, kwargs) -> None:
        ids, mask, pos = (
            kwargs.get("input_ids"),
            kwargs.get("attention_mask"),
            kwargs.get("position_ids"),
        )
        if mask is not None:  # right-padded rows
            real, examples, pairs = mask.sum(), mask.shape[0], (mask.cumsum(1) * mask).sum()
        elif pos is not None:  # packed rows: positions restart at 0 per example
            real, examples, pairs = ids.numel(), (pos == 0).sum(), (pos + 1).sum()
        else:
            b, n = ids.shape
            real, examples, pairs = ids.numel(), b, b * n * (n + 1) // 2
        # The LM head runs on the positions a boolean ``logits_to_keep`` selects, else on all.
        keep = kwargs.get("logits_to_keep")
        logits = (
            keep.sum()
            if isinstance(keep, torch.Tensor) and keep.dtype == torch.bool
            else ids.numel()
        )
        for key, value in (
            ("real", real),
            ("examples", examples),
            ("pairs", pairs),
            ("logits", logits),
        ):
            self.totals[key] = self.totals[key] + value

    def read(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.totals.items()}

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


class Window:
    """Time and counts between ``start()`` and ``stop()`` (the device is synced at both ends)."""

    def __init__(self, counter: TokenCounter, device: str):
        self.counter, self.device = counter, device
        self.seconds, self.counts, self._begin, self._t0 = 0.0, {}, None, 0.0

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._sync()
        self._begin = self.counter.read()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._t0
        end = self.counter.read()
        self.counts = {k: end[k] - self._begin[k] for k in end}


CPU_SIZES = (512, 1024, 2048)  # the best of these sets the CPU's ceiling (it varies ±5 % by size)
CUDA_SIZES = (4096, 8192)


def matmul_rate(device: str, precision: str, sizes=None, seconds: float = 0.7) -> float:
    """The device's dense matmul ceiling in TFLOP/s: the best square-matmul rate over ``sizes``."""
    on_cuda = device.startswith("cuda")
    sizes = sizes or (CUDA_SIZES if on_cuda else CPU_SIZES)
    return max(_square_matmul_rate(device, precision, n, seconds) for n in sizes)


def _square_matmul_rate(device: str, precision: str, n: int, seconds: float) -> float:
    """Throughput of repeated (n x n) @ (n x n) products in TFLOP/s (2 n^3 FLOPs each)."""
    from finetune.train.model_loading import torch_dtype

    on_cuda = device.startswith("cuda")
    a = torch.randn(n, n, device=device, dtype=torch_dtype(precision))
    b = torch.randn(n, n, device=device, dtype=torch_dtype(precision))
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    for _ in range(2):  # warm-up: kernels chosen, caches and clocks settled
        a @ b
    sync()
    reps, t0 = 0, time.perf_counter()
    while reps < 3 or time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
        if on_cuda and reps % 10 == 0:
            sync()
    sync()
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def model_shape(config, architecture: str, lora) -> dict:
    """Parameter counts the FLOPs formula needs, from the config alone (meta device)."""
    from transformers import AutoModelForCausalLM

    from finetune.train.model_loading import resolve_targets

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    targets = set(resolve_targets(model, architecture, lora))
    body = adapters = 0
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if (
            module is head
            or isinstance(module, torch.nn.Embedding)
            or not isinstance(weight, torch.Tensor)
            or weight.dim() != 2
        ):
            continue
        body += weight.numel()
        adapters += lora.r * sum(weight.shape) if name.rsplit(".", 1)[-1] in targets else 0
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return {
        "body_params": body,
        "lora_params": adapters,
        "head_params": head.weight.numel(),
        "layers": text.num_hidden_layers,
        "attention_width": heads * head_dim,
    }
