"""One forward pass of the running batch, each row through its own adapter.

The same four routes as ``ModelSession.generate`` (one adapter for every row -> merged
weights; only the base -> adapter layers off; a mix -> row-masked stacked LoRA updates;
other LoRA kinds -> PEFT's ``adapter_names``), chosen per decode step. What a route costs to
set up is kept between steps: the merged weights live in the session, and a
:class:`~inference.row_routing.RowRouter` is kept per adapter set, so a step only swaps row
masks when rows joined or left.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from inference.layers_off import adapters_off
from inference.merged import can_merge
from inference.row_routing import RowRouter, can_mask
from inference.session import BASE, ModelSession


class StepRouter:
    """Routes and runs forward passes for one session; use inside the session lock."""

    def __init__(self, session: ModelSession):
        self.session = session
        # (model id, adapters, uniform) -> None (merged) | RowRouter | False
        self._routes: dict = {}

    def forward(
        self,
        pefts: list[str | None],
        inputs: dict,
        tokens: list[int] | None = None,
        logits_to_keep: int | torch.Tensor = 1,
    ):
        """The model on ``inputs``; row ``i`` uses PEFT adapter ``pefts[i]`` (None: base).

        ``tokens``: for prompts packed into one row (``packed_prefill.py``), each prompt's
        token count; the prompts are then ``inputs``' row 0, one after the other.
        """
        model, device = self.session.model, self.session.device
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        if isinstance(logits_to_keep, torch.Tensor):
            logits_to_keep = logits_to_keep.to(device)
        route, extra = self._route(model, pefts, tokens)
        with torch.inference_mode(), route:
            try:
                return model(**inputs, logits_to_keep=logits_to_keep, **extra)
            except BaseException:
                if extra:  # PEFT leaves its adapter_names hooks behind after an exception
                    from inference.routing import (
                        drop_adapter_name_hooks as _drop_adapter_name_hooks,
                    )

                    _drop_adapter_name_hooks(model)
                raise

    def packs(self, pefts: list[str | None]) -> bool:
        """Whether prompts for ``pefts`` (in this order) can be prefilled packed: the route
        is merged weights, adapters off, or masked rows with each adapter's rows together."""
        if not any(pefts):
            return True
        router = self._router(self.session.model, pefts)
        return router is None or (isinstance(router, RowRouter) and router.groups_rows(pefts))

    def _router(self, model, pefts: list[str | None]):
        """The kept route for these rows' adapters (at least one): None (merged weights),
        a ``RowRouter``, or False (PEFT's ``adapter_names``)."""
        names = sorted(set(p for p in pefts if p))
        uniform = len(names) == 1 and None not in pefts
        # PEFT names are unique per load, so a reloaded adapter never meets a stale router
        key = (id(model), tuple(names), uniform)
        if key not in self._routes:
            if len(self._routes) >= 8:
                self._routes.clear()
            if uniform and can_merge(model, names[0]):
                self._routes[key] = None
            else:
                self._routes[key] = RowRouter(model, names) if can_mask(model, names) else False
        return self._routes[key]

    def _route(self, model, pefts: list[str | None], tokens: list[int] | None = None):
        """The context that routes each row, and extra forward arguments."""
        if not any(pefts):
            return adapters_off(model), {}
        router = self._router(model, pefts)
        if router is None:
            return self.session.merged.use(model, next(p for p in pefts if p)), {}
        if router:
            return router.routed(pefts, tokens), {}
        return nullcontext(), {"adapter_names": [p or BASE for p in pefts]}
