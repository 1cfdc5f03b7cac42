"""The training step with its decoder layers compiled (``train.compile``): regional
``torch.compile``, each decoder layer compiled once per process.

A small model's LoRA step on a GPU is launch-bound: hundreds of small kernels (autocast's casts,
dropout, LoRA's scaling, the norms) each cost more to launch than to run. Compiling the decoder
layer fuses them; all layers run the same code, so one compilation serves them all and takes
seconds, not minutes (``python -m bench gpu-step`` measures both; docs/benchmarks.md).

Only the training step runs compiled. Validation, probe answers and ``generate`` run the same
layers eagerly (``eager()``, ``torch.compiler.set_stance("force_eager")``): ``generate``'s
growing KV cache would recompile at every new length until dynamo's limit, and a no-grad
forward would compile a second graph for a few batches. The step's shapes change from batch to
batch (rows grouped by length): the first call compiles for its shapes, the second, on another
length, once more with that dimension symbolic, and later lengths reuse it (``graphs()`` counts).

On the CPU the layers compile without TuneDesk's hand-written layer ops (lean LoRA and
dropout, short-row attention: ``load_lora_model(lean_layers=False)``): those are keyed by each
layer's own weights, so dynamo would compile them again for every layer; the compiler fuses
the plain ops itself.

Where compiling fails (a backend that cannot build here, an op dynamo cannot trace), the run
says so and trains eagerly (``Compiled.step``): compiling is a speed-up, never a reason a run
stops.
"""

from __future__ import annotations

import contextlib
import time

import torch

from finetune.config import COMPILE_SETTINGS


def wanted(setting: str, device: str, quantization: str = "none", sharding: str = "ddp") -> bool:
    """Whether a run compiles its decoder layers: ``on``/``off`` as asked; ``auto`` on a CUDA
    GPU for an unquantized base in one process or under DDP, where the compiled step was
    measured faster. On the CPU ``auto`` stays eager: there the step's time goes to matmuls,
    and what compiling costs in the first steps takes most of a short budget's steps to win
    back (``python -m bench compile-step``; docs/benchmarks.md). A quantized base and FSDP
    compile when asked (``on``); ``auto`` leaves them eager until measured on a GPU."""
    if setting not in COMPILE_SETTINGS:
        raise ValueError(f"compile must be one of {', '.join(COMPILE_SETTINGS)} (got {setting!r})")
    if setting != "auto":
        return setting == "on"
    return device.startswith("cuda") and quantization == "none" and sharding != "fsdp"


def decoder_layers(model) -> torch.nn.ModuleList:
    """The model's decoder layers: its longest ``nn.ModuleList``."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no list of decoder layers to compile")
    return max(lists, key=len)


def graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def eager():
    """A context in which compiled layers run eagerly (validation, probes, ``generate``)."""
    return torch.compiler.set_stance("force_eager")


class Compiled:
    """The decoder layers of one run, compiled; ``step`` runs a training step through them.

    ``first_s`` is the first step's seconds (compiling included), ``failed`` why compiling
    was given up ("" while it works)."""

    def __init__(self, model):
        for layer in decoder_layers(model):
            layer.compile()
        self.calls, self.first_s, self.failed = 0, None, ""
        self.shapes: set = set()  # the (rows, tokens) shapes the steps ran on
        self.compiled_last = False  # whether the last step compiled a graph
        self.graphs_before = graphs()  # dynamo's count is the process's: this run's is the rest

    def step(self, fn, on_failure):
        """``fn()`` compiled; on the first call a compile error turns compiling off for the
        run: ``on_failure(reason)`` clears what the failed step left (its gradients) and the
        step runs again eagerly. Errors of a later call, or an out-of-memory error, are the
        step's own and propagate."""
        if self.failed:
            with eager():
                return fn()
        t, before = time.perf_counter(), graphs()
        try:
            out = fn()
        except Exception as err:
            from core.gpu import is_oom

            if self.calls or is_oom(err):
                raise
            self._give_up(f"{type(err).__name__}: {' '.join(str(err).split())[:200]}")
            on_failure(self.failed)
            with eager():
                return fn()
        if self.calls == 0:
            self.first_s = time.perf_counter() - t
        self.calls += 1
        self.compiled_last = graphs() != before
        return out

    def _give_up(self, reason: str) -> None:
        self.failed = reason  # every later step runs under eager()
        torch._dynamo.reset()  # what the failed compile left in dynamo's caches


def eager_if(compiled: Compiled | None):
    """``eager()`` when the run compiles, else a context that does nothing."""
    return eager() if compiled is not None else contextlib.nullcontext()


def record(c: Compiled | None) -> dict:
    """What the adapter's manifest keeps of it: whether the step ran compiled, the first step's
    seconds (compiling included), the graphs compiled for how many batch shapes, why compiling
    was given up."""
    if c is None:
        return {"compiled": False}
    out = {
        "compiled": not c.failed,
        "compiled_graphs": graphs() - c.graphs_before,
        "step_shapes": len(c.shapes),
    }
    if c.first_s is not None:
        out["first_step_s"] = round(c.first_s, 2)
    if c.failed:
        out["compile_failed"] = c.failed
    return out
