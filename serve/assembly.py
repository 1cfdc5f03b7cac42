"""The serving side of TuneDesk assembled in one place: the browser app and ``python -m serve``
both build their model session and engines here, so they answer alike."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from core.activity import training_active
from core.hardware import detect
from inference.session import ModelSession
from serve.engines import Engines

log = logging.getLogger("tunedesk.serve")


@dataclass
class Services:
    """One base model in memory with its adapters, and the engines that answer from it."""

    session: ModelSession
    engines: Engines


def build_services(base_model: str = "default", serving: str = "auto") -> Services:
    """The session for ``base_model`` (not loaded yet) and the engines answering Chat, Compare
    and ``/v1`` (``serving``: ``auto``, ``pytorch`` or ``llama.cpp``).

    While a training child computes on the same cores, each call uses one thread.
    TUNEDESK_DTYPE (auto | float32 | bfloat16 | float16) picks the serving dtype; auto is the
    faster of fp32 and bf16 by a short measurement (inference/devices.py).
    """
    session = ModelSession(
        base_model,
        device=detect().default_device,
        dtype=os.environ.get("TUNEDESK_DTYPE", "auto"),
        cores_busy=training_active,
    )
    return Services(session, Engines(session, serving))


def warn_unpassed() -> list[str]:
    """Log a warning line per shelf adapter that has not passed its release gate (served anyway)."""
    from adapters.shelf.gate_rules import shelf_warnings
    from adapters.shelf.store import Shelf

    lines = shelf_warnings(Shelf())
    if lines and not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    for line in lines:
        log.warning("served anyway: %s", line)
    return lines
