"""How many rows the running batch may hold: a cap from the machine's free memory.

The KV cache is what grows with the batch. One token of one row costs, in bytes::

    kv_per_token = 2 (keys, values) x layers x kv_heads x head_dim x bytes per element

(SmolLM2-135M: 2 x 30 x 3 x 64 x 4 = 46 KB in fp32, 23 KB in bf16). A request reserves
``prompt + max_new_tokens`` tokens, and since rows are left-padded to the longest one, a
batch of ``n`` rows holds at most ``n x longest reservation`` tokens. The scheduler admits a
waiting request only while::

    rows x longest reservation x kv_per_token <= KV_SHARE x MemAvailable (at start)

(the GPU's free memory instead on CUDA) and ``rows <= max_batch``, where the default
``max_batch`` is what fits when every row may fill the model's whole context, clamped to
1..MAX_ROWS. What does not fit waits in the queue.
"""

from __future__ import annotations

from pathlib import Path

KV_SHARE = 0.5  # of the memory free at start: the rest is for weights of new adapters, others
MAX_ROWS = 64  # beyond this a decode step on a CPU gains nothing and the waits grow


def available_bytes() -> int:
    """Memory the OS can hand out now (``MemAvailable``), from /proc/meminfo or psutil."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        return 4 * 2**30  # no way to know: assume a small machine


def device_free_bytes(device: str) -> int:
    """Memory free where tensors of ``device`` live: the GPU's own on CUDA, else the host's."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return available_bytes()


def kv_bytes_per_token(config, element_bytes: int) -> int:
    """Bytes of keys and values one token of one row holds, over all layers."""
    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * element_bytes


def context_limit(config) -> int:
    """Tokens the model reads at most (its position table); 2048 when the config says nothing."""
    return int(
        getattr(config, "max_position_embeddings", None)
        or getattr(config, "n_positions", None)
        or 2048
    )


class KvBudget:
    """The admission rule above, for one model and dtype."""

    def __init__(
        self,
        config,
        element_bytes: int,
        max_batch: int | None = None,
        free_bytes: int | None = None,
    ):
        self.per_token = kv_bytes_per_token(config, element_bytes)
        self.bytes = int(KV_SHARE * (available_bytes() if free_bytes is None else free_bytes))
        fits = self.bytes // (self.per_token * context_limit(config))
        self.max_batch = max_batch or max(1, min(MAX_ROWS, fits))

    def fits(self, rows: int, longest: int) -> bool:
        """True when ``rows`` rows padded to ``longest`` reserved tokens fit (one always may)."""
        return rows == 1 or (
            rows <= self.max_batch and rows * longest * self.per_token <= self.bytes
        )
