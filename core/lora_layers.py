"""PEFT's LoRA layers in memory: the one module that reads and writes their internals.

PEFT keeps each adapter's pieces inside every LoRA layer under attribute names that are not
part of its documented API (``lora_A``, ``lora_B``, ``scaling``, ``lora_dropout``,
``lora_variant``, ``_disable_adapters`` ...). Training's lean CPU forward
(``finetune.train.lean_lora``), the merged single-adapter weights (``inference.merged``),
the per-row compare routing (``inference.row_routing``) and the cheap adapters-off switch
(``inference.layers_off``) all need them; they ask this module, so a PEFT upgrade that
renames or reshapes those attributes is fixed here alone.

It lives in ``core/`` because both ``finetune/`` and ``inference/`` use it and neither may
import the other, while ``adapters/`` is the adapter as an artefact on disk, not the model in
memory. Like the rest of ``core/`` it imports neither torch nor peft at import time: peft's
classes are imported inside the functions that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LoraParts:
    """One adapter's pieces inside one PEFT LoRA ``Linear``: the very modules PEFT runs.

    Attributes:
        adapter: the PEFT adapter name.
        base: the layer LoRA wraps directly (frozen), usually a ``torch.nn.Linear``.
        a: ``lora_A[adapter]``, a Linear whose weight is (rank, in).
        b: ``lora_B[adapter]``, a Linear whose weight is (out, rank).
        scaling: what PEFT multiplies the update by (alpha / rank; alpha / sqrt(rank) with
            rsLoRA).
        dropout: the module applied to the input of ``a`` (``torch.nn.Identity`` for none).
        fan_in_fan_out: the base weight is stored (in, out), as in GPT-2's Conv1D.
    """

    adapter: str
    base: Any
    a: Any
    b: Any
    scaling: float
    dropout: Any
    fan_in_fan_out: bool

    @property
    def rank(self) -> int:
        return self.a.weight.shape[0]

    def delta(self) -> torch.Tensor:
        """``scaling * B @ A`` in float32, in the base weight's layout (what merging adds)."""
        delta = (self.b.weight.float() @ self.a.weight.float()) * self.scaling
        return delta.t() if self.fan_in_fan_out else delta


def lora_linear_class() -> type:
    """PEFT's LoRA ``Linear`` class (for exact ``type(m) is`` checks)."""
    from peft.tuners.lora.layer import Linear

    return Linear


def is_lora_linear(module) -> bool:
    """Whether ``module`` is a PEFT LoRA ``Linear`` (or a subclass of it)."""
    return isinstance(module, lora_linear_class())


def holds(module, adapter: str) -> bool:
    """Whether the (LoRA or other) layer ``module`` holds LoRA weights for ``adapter``."""
    return adapter in getattr(module, "lora_B", {})


def tuner_layers(model) -> list:
    """Every PEFT tuner layer of ``model``, of any kind (LoRA Linear, Embedding, Conv ...)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def adapter_layers(model, adapter: str) -> list:
    """Every PEFT tuner layer of ``model`` holding ``adapter``'s LoRA weights, of any kind."""
    return [m for m in tuner_layers(model) if holds(m, adapter)]


def lora_linears(model, adapter: str) -> list:
    """The PEFT LoRA ``Linear`` layers of ``model`` holding ``adapter``, in module order."""
    linear = lora_linear_class()
    return [m for m in model.modules() if isinstance(m, linear) and holds(m, adapter)]


def parts(layer, adapter: str) -> LoraParts:
    """``adapter``'s pieces in the LoRA ``Linear`` ``layer`` (which must hold it)."""
    return LoraParts(
        adapter=adapter,
        base=layer.base_layer,
        a=layer.lora_A[adapter],
        b=layer.lora_B[adapter],
        scaling=float(layer.scaling[adapter]),
        dropout=layer.lora_dropout[adapter],
        fan_in_fan_out=bool(getattr(layer, "fan_in_fan_out", False)),
    )


def base_layer(layer):
    """The innermost layer under a LoRA layer: the one holding the base weight (which merged
    copies replace), through any wrappers stacked in between."""
    return layer.get_base_layer()


def wrapped_layer(layer):
    """The layer a LoRA layer calls directly for the base part of its output."""
    return layer.base_layer


def has_variant(layer, adapter: str) -> bool:
    """Whether ``adapter`` is a LoRA variant in ``layer`` (DoRA and others), which computes
    its update differently from ``scaling * B @ A``."""
    return adapter in getattr(layer, "lora_variant", {})


def has_lora_bias(layer, adapter: str) -> bool:
    """Whether ``adapter``'s A or B in ``layer`` carries a bias (PEFT's ``lora_bias``)."""
    return layer.lora_A[adapter].bias is not None or layer.lora_B[adapter].bias is not None


def is_plain(layer, adapters: list[str], *, bias_free: bool = False) -> bool:
    """Whether ``layer`` is an unmerged LoRA ``Linear`` with no variant for any of
    ``adapters`` (and, with ``bias_free``, no LoRA bias): the update is ``scaling * B @ A``."""
    if not is_lora_linear(layer) or layer.merged or any(has_variant(layer, a) for a in adapters):
        return False
    return not (bias_free and any(has_lora_bias(layer, a) for a in adapters))


def single_active_adapter(layer) -> str | None:
    """The one adapter ``layer`` would apply now: enabled, unmerged, exactly one active
    adapter held here and not a variant; None in every other case."""
    if layer.disable_adapters or layer.merged:
        return None
    active = [a for a in layer.active_adapters if a in layer.lora_A]
    if len(active) != 1 or has_variant(layer, active[0]):
        return None
    return active[0]


def dropouts(layer) -> dict:
    """``{adapter: dropout module}`` of a LoRA layer; empty for any other module."""
    import torch

    held = getattr(layer, "lora_dropout", None)
    return dict(held.items()) if isinstance(held, torch.nn.ModuleDict) else {}


def set_dropout(layer, adapter: str, dropout) -> None:
    """Replace the dropout ``layer`` applies to ``adapter``'s input."""
    layer.lora_dropout[adapter] = dropout


def switchable_layers(model) -> list:
    """PEFT's adapter layers and auxiliary wrappers (modules_to_save) inside ``model`` that
    carry an adapters-off flag (see :func:`adapters_disabled`)."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    return [
        m
        for m in model.modules()
        if isinstance(m, (BaseTunerLayer, AuxiliaryTrainingWrapper))
        and hasattr(m, "_disable_adapters")
    ]


def adapters_disabled(layer) -> bool:
    """The flag a PEFT adapter layer reads in its forward: True passes input to the base."""
    return layer._disable_adapters


def set_adapters_disabled(layer, value: bool) -> None:
    """Set that flag alone, without ``disable_adapter()``'s walk over ``requires_grad``."""
    layer._disable_adapters = value
