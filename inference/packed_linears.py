"""A float32 model's linear layers on a CPU through oneDNN's prepacked matmul.

PyTorch's plain ``F.linear`` goes to MKL, which on small batches runs on ONE thread, so a
decode step is as slow with two threads as with one. oneDNN's prepacked weights
(``torch.ops.mkldnn._reorder_linear_weight`` + ``_linear_pointwise``, the kernels
``torch.compile`` freezes CPU linears into) use every thread, and are as fast or faster for
prompt prefill and for the large output layer (tied to the embeddings). oneDNN's rows are also
batch-invariant: a row's output is bit-identical alone or beside other rows (the plain
matmul's differ in the last bits), which keeps batched greedy answers equal to solo ones.

Each layer keeps a packed copy of the weights it was packed for, and uses it only while it
holds exactly those weights: :mod:`inference.merged` swaps merged copies in by replacing
``weight.data``, and registers a packed copy of each merged weight here (:func:`add_pack`), so
a single-adapter batch runs packed too; any weight without a packed copy goes through
``F.linear``. Nothing in the session modifies weights in place. The copies cost memory (one
more copy of the packed weights), so projections are packed only while they take at most a
quarter of the memory free at load; the output layer always. Every swap is checked against
``F.linear`` first; any failure leaves the plain layer.
"""

from __future__ import annotations

import os

PACK_ROWS_HINT = 16  # the batch size oneDNN packs for; measured no slower from 1 to 2,048 rows
MEMORY_SHARE = 0.25  # of MemAvailable at load, at most, for packed copies of the projections
ENV = "TUNEDESK_PACKED_LINEARS"  # all (default) | head (the output layer only) | off: an
#                                  escape hatch, and the baselines of ``python -m bench serving
#                                  --clients ... --linears head,all``
_PACKS = "_tunedesk_packs"  # on a packed Linear: [(weight tensor, its packed copy), ...]


def pack_linears(model, free_bytes: int | None = None) -> str:
    """Route ``model``'s plain float32 linear layers (CPU) through oneDNN's prepacked matmul.

    Args:
        model: a transformers model (before or after PEFT wraps its projections).
        free_bytes: memory free now (default: ``MemAvailable``), which bounds the projections.

    Returns:
        One line saying what was packed, or why not (the session's status and logs show it).
    """
    import torch

    mode = os.environ.get(ENV, "all").strip().lower() or "all"
    if mode not in ("all", "head", "off"):
        return f"linear layers left as is: {ENV}={mode!r} is not one of all, head, off"
    if mode == "off":
        return f"linear layers left as is: {ENV}=off"
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is None or weight.device.type != "cpu" or weight.dtype != torch.float32:
        where = "no weight" if weight is None else f"{weight.dtype} on {weight.device.type}"
        return f"linear layers left as is: {where} (packed only for CPU float32)"
    if not torch.backends.mkldnn.is_available():
        return "linear layers left as is: this PyTorch has no oneDNN"
    reason = _check_kernel(torch)
    if reason:
        return f"linear layers left as is: {reason}"
    done = ["output layer"] if _pack(head) else []
    if mode == "head":
        return _say(done, f"projections not packed: {ENV}=head")
    layers = [
        m
        for name, m in model.named_modules()
        if _plain(m) and m is not head and "lora_" not in name
    ]
    need = sum(m.weight.nbytes for m in layers)
    if not fits_packed(need, free_bytes):
        return _say(
            done,
            f"projections not packed: {need / 2**20:.0f} MB of copies would pass "
            f"{MEMORY_SHARE:.0%} of the memory free",
        )
    packed = sum(_pack(m) for m in layers)
    return _say(done + [f"{packed} projections"] if packed else done, "")


def fits_packed(nbytes: int, free_bytes: int | None = None) -> bool:
    """Whether packed copies of ``nbytes`` of weights fit in the share of free memory allowed."""
    if free_bytes is None:
        from core.limits import available_bytes

        free_bytes = available_bytes()
    return nbytes <= MEMORY_SHARE * free_bytes


def add_pack(layer, weight) -> bool:
    """Give ``layer`` (a packed Linear) a packed copy of ``weight``, used whenever it holds it.

    Returns False (nothing done) when ``layer`` is not packed."""
    import torch

    packs = getattr(layer, _PACKS, None)
    if packs is None or weight.dtype != torch.float32:
        return False
    packs.append((weight, packed_weight(weight)))
    return True


def drop_pack(layer, weight) -> None:
    """Forget the packed copy of ``weight`` (the base weights' own copy is never dropped)."""
    packs = getattr(layer, _PACKS, None)
    if packs:
        packs[1:] = [p for p in packs[1:] if p[0] is not weight]


def packed_weight(weight):
    """A oneDNN packed copy of a float32 ``(out, in)`` weight, for ``_linear_pointwise``."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)


def packed_count(model) -> int:
    """How many of ``model``'s layers run packed."""
    return sum(1 for m in model.modules() if getattr(m, _PACKS, None) is not None)


def _plain(module) -> bool:
    import torch

    return (
        type(module) is torch.nn.Linear
        and "forward" not in vars(module)
        and module.weight.device.type == "cpu"
        and module.weight.dtype == torch.float32
    )


def _pack(layer) -> bool:
    """Swap ``layer``'s forward for the packed one; False when it is not a plain linear."""
    import torch

    if not _plain(layer):
        return False
    weight = layer.weight.detach()
    packs = [(weight, packed_weight(weight))]
    linear_pointwise, plain_linear = torch.ops.mkldnn._linear_pointwise, torch.nn.functional.linear

    def forward(x):
        held, bias = layer.weight, layer.bias
        ptr = held.data_ptr()
        for source, packed in packs:  # a held reference: its memory cannot be reused meanwhile
            if source.data_ptr() == ptr:
                return linear_pointwise(x, packed, bias, "none", [], "")
        return plain_linear(x, held, bias)

    setattr(layer, _PACKS, packs)
    layer.forward = forward  # this instance only; its weight (maybe tied) is untouched
    return True


def _check_kernel(torch) -> str:
    """Why the packed kernel cannot be used here ('' when it agrees with ``F.linear``)."""
    try:
        with torch.no_grad():
            weight, probe = torch.randn(40, 24), torch.randn(3, 24)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS_HINT)
            got = torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
            want = torch.nn.functional.linear(probe, weight)
    except (RuntimeError, AttributeError) as err:  # an op missing from this build, a CPU it refuses
        return f"{type(err).__name__}: {str(err)[:120]}"
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
        return "the packed matmul disagreed with the plain one"
    return ""


def _say(done: list[str], note: str) -> str:
    text = (
        ("oneDNN prepacked float32 matmuls: " + " and ".join(done))
        if done
        else "linear layers left as is"
    )
    return text + (f"; {note}" if note else "")
