"""One batched forward pass where each row uses its own adapter (or none): the compare panes.

PEFT's ``adapter_names`` does this by indexing every LoRA layer's input and output per
adapter, in Python, at each token, which on the CPU costs more than the LoRA products
themselves. Running PEFT's own LoRA forward for the whole batch and zeroing other rows'
``lora_B`` outputs is hardly cheaper (PEFT calls four modules per adapter per layer).

So while ``masked_rows`` is open, PEFT's adapter layers are switched off, and each LoRA
layer that holds one of the batch's adapters runs its own forward instead of PEFT's: its
base ``Linear`` plus the LoRA update of every adapter the batch uses at once, in float32::

    out += ((x @ [A1; A2]^T) * M) @ [B1 B2]^T

``[A1; A2]`` and ``[B1 B2]`` are the adapters' LoRA matrices stacked (built once per call),
and ``M`` holds, for each row, its adapter's scaling on that adapter's rank block and 0
elsewhere. Rows of other adapters and base rows get exactly zero from a block, so each row
computes what it would alone (a base row is bit-identical to the base model), with a few
tensor operations per layer whatever the number of adapters. Layers that read the same
input (q, k, v; gate, up) share one ``x @ A`` product.

A prompt (more than one token a row) whose rows come grouped by adapter (the scheduler sorts
newcomers so) runs each adapter on its own rows only, ``out[rows] += ((x[rows] @ A) * s) @ B``:
the mask would run every adapter on every prompt token. A decode step (one token a row) keeps
the mask: one product a layer beats one per adapter there.

The LoRA pieces are read through :mod:`core.lora_layers`. The session calls this under its
lock, so no other request sees the swapped forwards; they are restored when the block exits.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch

from core import lora_layers
from inference.layers_off import adapters_off


def can_mask(model, adapters: list[str]) -> bool:
    """True when every LoRA layer holding one of ``adapters`` is a plain (vanilla, unmerged,
    bias-free) LoRA ``Linear``; other layer kinds and variants (DoRA, …) need PEFT's
    ``adapter_names``."""
    for module in lora_layers.tuner_layers(model):
        held = [a for a in adapters if lora_layers.holds(module, a)]
        if held and not lora_layers.is_plain(module, held, bias_free=True):
            return False
    return True


class _SharedInput:
    """The ``x @ A`` products of LoRA layers that read one input (q, k and v; gate and up).

    Layers of one parent with the same input width share it: the first of them to see a
    new input computes the product for all (one matmul), the others slice it. A layer that
    gets another tensor (o_proj after attention) simply recomputes.
    """

    def __init__(self):
        self.parts: list[torch.Tensor] = []
        self.members: list[_StackedLora] = []
        self.a_t = None
        self.mask = None  # (rows, 1, sum r of all members): the members' row masks side by side
        self.x = None
        self.lowered = None

    def add(self, a_t: torch.Tensor, member: _StackedLora) -> slice:
        start = sum(p.shape[1] for p in self.parts)
        self.parts.append(a_t)
        self.members.append(member)
        return slice(start, start + a_t.shape[1])

    def set_mask(self) -> None:
        self.mask = torch.cat([m.mask for m in self.members], dim=-1)

    def lowered_for(self, x: torch.Tensor) -> torch.Tensor:
        """``(x @ A) * M`` for every member at once: (..., sum r), masked per row."""
        if x is not self.x:
            if self.a_t is None:
                self.a_t = torch.cat(self.parts, dim=1).contiguous()
            lowered = torch.matmul(x.float(), self.a_t)
            self.x, self.lowered = (
                x,
                lowered.mul_(self.mask if lowered.dim() == 3 else self.mask.squeeze(1)),
            )
        return self.lowered

    def release(self) -> None:
        self.x = self.lowered = None


class _StackedLora:
    """The LoRA matrices of the batch's adapters in one layer, stacked; the row mask is set
    per batch layout by :class:`RowRouter`.

    Kept in float32 whatever the model's dtype: at decode sizes (a few rows × rank 16) a
    bf16 matmul on the CPU is slower than an fp32 one, and the update is added to the layer's
    output once, at its dtype.
    """

    def __init__(self, module, held: list[str], shared: _SharedInput):
        loras = [lora_layers.parts(module, a) for a in held]
        a_t = torch.cat([lora.a.weight for lora in loras]).t().float()  # (in, sum r)
        self.mask = None  # (rows, 1, sum r)
        self.shared, self.columns = shared, shared.add(a_t, self)
        # (sum r, out)
        self.b_t = torch.cat([lora.b.weight for lora in loras], dim=1).t().float().contiguous()
        # layers with the same adapters, ranks and scalings share one row mask
        self.signature = tuple((lora.adapter, lora.rank, lora.scaling) for lora in loras)
        self.device = loras[0].a.weight.device
        # per adapter, for prompts whose rows come grouped by adapter (set_rows' ranges)
        self.blocks = [
            (lora.a.weight.t().float().contiguous(), lora.b.weight.t().float().contiguous())
            for lora in loras
        ]
        self.ranges: list | None = None  # [(first row, end row, block index, scaling), ...]
        self.packed = False  # prompts packed into row 0: ranges count tokens along it
        base = lora_layers.wrapped_layer(module)
        # a plain Linear is called without nn.Module's hooks machinery: its own forward, which
        # is oneDNN's packed matmul where packed_linears.py swapped it in
        self.base = base.forward if type(base) is torch.nn.Linear else base

    def forward(self, x, *args, **kwargs):
        """The layer's forward while routing: its base ``Linear`` plus the masked update."""
        output = self.base(x, *args, **kwargs)
        if self.packed:  # row 0 holds the prompts one after the other
            self._grouped(x[0], output[0])
            return output
        if (
            self.ranges is not None
            and x.dim() == 3
            and x.shape[1] > 1
            and output.is_contiguous()
            and output.dtype == torch.float32
        ):
            return self._grouped(x, output)
        lowered = self.shared.lowered_for(x)[..., self.columns]  # masked per row already
        if output.dtype == lowered.dtype and output.is_contiguous():  # float32: one fused addmm
            output.view(-1, output.shape[-1]).addmm_(
                lowered.reshape(-1, lowered.shape[-1]), self.b_t
            )
            return output
        return output.add_(torch.matmul(lowered, self.b_t))

    def _grouped(self, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """A prompt's update where each adapter's rows are one block: only those rows through
        that adapter's matrices (the mask would run every adapter on every row)."""
        for first, end, block, scaling in self.ranges:
            a_t, b_t = self.blocks[block]
            lowered = torch.mm(x[first:end].reshape(-1, x.shape[-1]).float(), a_t).mul_(scaling)
            if output.dtype == torch.float32:
                output[first:end].view(-1, output.shape[-1]).addmm_(lowered, b_t)
            else:
                output[first:end] += (lowered @ b_t).view(output[first:end].shape).to(output.dtype)
        return output


def _row_ranges(signature: tuple, row_adapters: list[str | None]) -> list | None:
    """[(first row, end row, block index, scaling)] when every adapter of ``signature`` has its
    rows side by side (None otherwise)."""
    ranges = []
    for block, (adapter, _, scaling) in enumerate(signature):
        rows = [i for i, row in enumerate(row_adapters) if row == adapter]
        if rows and rows[-1] - rows[0] + 1 != len(rows):
            return None
        if rows:
            ranges.append((rows[0], rows[-1] + 1, block, scaling))
    return ranges


def _row_mask(signature: tuple, row_adapters: list[str | None], device) -> torch.Tensor:
    """(rows, 1, sum r): each row's adapter scaling on that adapter's rank block, 0 elsewhere."""
    blocks = []
    for adapter, rank, scaling in signature:
        column = [scaling if row == adapter else 0.0 for row in row_adapters]
        blocks.append(torch.tensor(column, device=device).unsqueeze(1).expand(-1, rank))
    return torch.cat(blocks, dim=1).unsqueeze(1)


class RowRouter:
    """The stacked LoRA matrices of a set of adapters, built once and reused for many calls.

    Building the stacks costs tens of ms on the default model; a continuous batch keeps one
    router per adapter set and only swaps the row masks when rows join or leave.
    """

    def __init__(self, model, adapters: list[str]):
        self.model, self.layers, self.groups = model, [], {}
        self.rows: tuple | None = None
        for parent in model.modules():
            for module in parent.children():
                held = [a for a in adapters if lora_layers.holds(module, a)]
                if held and lora_layers.is_lora_linear(module):
                    shared = self.groups.setdefault(
                        (id(parent), module.in_features), _SharedInput()
                    )
                    self.layers.append((module, _StackedLora(module, held, shared)))

    def set_rows(self, row_adapters: list[str | None], tokens: list[int] | None = None) -> None:
        """Point every layer's mask at the row layout ``row_adapters``; with ``tokens`` (each
        row's token count), the rows are packed one after the other into row 0."""
        layout = (tuple(row_adapters), None if tokens is None else tuple(tokens))
        if self.rows == layout:
            return
        if tokens is not None and not self.groups_rows(row_adapters):
            raise ValueError("packed prompts need each adapter's rows side by side")
        starts = None if tokens is None else [0, *itertools.accumulate(tokens)]
        masks, ranges = {}, {}
        for _, stacked in self.layers:
            if stacked.signature not in masks:
                masks[stacked.signature] = _row_mask(
                    stacked.signature, row_adapters, stacked.device
                )
                ranges[stacked.signature] = _row_ranges(stacked.signature, row_adapters)
                if starts is not None:  # rows -> token runs along the packed row
                    ranges[stacked.signature] = [
                        (starts[first], starts[end], block, scaling)
                        for first, end, block, scaling in ranges[stacked.signature]
                    ]
            stacked.mask = masks[stacked.signature]
            stacked.ranges = ranges[stacked.signature]
            stacked.packed = starts is not None
        for shared in self.groups.values():
            shared.set_mask()
        self.rows = layout

    def groups_rows(self, row_adapters: list[str | None]) -> bool:
        """Whether every adapter's rows in ``row_adapters`` are side by side."""
        return all(
            _row_ranges(stacked.signature, row_adapters) is not None for _, stacked in self.layers
        )

    @contextmanager
    def routed(self, row_adapters: list[str | None], tokens: list[int] | None = None):
        """While open, row ``i`` uses adapter ``row_adapters[i]`` (None: the base model);
        ``tokens``: see :meth:`set_rows`."""
        self.set_rows(row_adapters, tokens)
        routed = []
        try:
            with adapters_off(self.model):  # layers without the batch's adapters: base only
                for module, stacked in self.layers:
                    module.forward = stacked.forward
                    routed.append(module)
                yield
        finally:
            for module in routed:
                del module.forward  # back to the class's (PEFT's) forward
            for shared in self.groups.values():
                shared.release()


@contextmanager
def masked_rows(model, row_adapters: list[str | None]):
    """While open, row ``i`` of a batch through ``model`` uses PEFT adapter ``row_adapters[i]``
    (None: the base model alone). ``model`` is a PeftModel; check ``can_mask`` first."""
    used = list(dict.fromkeys(a for a in row_adapters if a))
    with RowRouter(model, used).routed(row_adapters):
        yield
