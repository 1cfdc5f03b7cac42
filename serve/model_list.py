"""Which models the OpenAI-compatible API serves, by what names, and what ``/v1/models`` says
of each: the base model (its own name, or ``base``), every whole adapter on the session's shelf
with its release gate's verdict, and the aliases with their splits. Also the log line, once per
adapter version, that an adapter is served without having passed its gate.

``ShelfModels`` is a part of :class:`serve.openai_api.OpenAIServer` (which supplies ``engines``,
``shelf()`` and ``aliases``); the errors and cards here are what its routes answer.
"""

from __future__ import annotations

import logging

from adapters.shelf.gate_rules import entry_status, warning_for
from serve.api_basics import ApiError

BASE_ALIASES = ("base", "__base__")
log = logging.getLogger("tunedesk.serve")


class ShelfModels:
    """The model names of an ``OpenAIServer``: needs ``self.engines``, ``self.shelf()``,
    ``self.aliases``, ``self._warned`` and ``self._gate_seen``."""

    def model_ids(self) -> list[str]:
        """The base model's name, then every whole adapter on the session's shelf."""
        return [self.base_id(), *(e.name for e in self.shelf().list() if e.ok)]

    def model_cards(self) -> list[dict]:
        """``/v1/models``: the base model by its own name, then by ``base`` (the name the README's
        requests use, so a client that picks from this list finds it); each adapter's card says
        whether it passed its release gate (the reasons it failed, and the support checks'
        floors with their figures); then the aliases with their splits (an alias hides an
        adapter of the same name)."""
        aliases = self.aliases.splits()
        base = self.base_id()
        cards = [model_card(base), {**model_card(BASE_ALIASES[0]), "tunedesk_base_model": base}]
        cards += [
            adapter_card(entry)
            for entry in self.shelf().list()
            if entry.ok and entry.name not in aliases
        ]
        return cards + [alias_card(name, split) for name, split in aliases.items()]

    def warn_if_not_passed(self, adapter: str) -> None:
        """Log once per adapter version that it is served without having passed its gate
        (looked at again only when a file the verdict depends on changes)."""
        try:
            folder = self.engines.session.adapter_folder(adapter)
            stamp = tuple(
                _mtime(folder / f)
                for f in ("manifest.json", "gate.json", "adapter_model.safetensors")
            )
        except ValueError:
            stamp = None
        if stamp is not None and self._gate_seen.get(adapter) == stamp:
            return
        try:
            entry = self.shelf().get(adapter)
        except ValueError:
            return  # the engine refuses it in a sentence
        self._gate_seen[adapter] = stamp
        key = (adapter, entry.adapter_hash)
        if key in self._warned or not entry.ok:
            return
        warning = warning_for(entry)
        if warning:
            self._warned.add(key)
            log.warning("serving anyway: %s", warning)

    def base_id(self) -> str:
        from core.models import DEFAULT_MODEL, is_default

        base = self.engines.session.base_name
        return DEFAULT_MODEL if is_default(base) else str(base)

    def resolve_model(self, model: str):
        """None for the base model, the adapter name for an adapter, False when unknown."""
        if model in BASE_ALIASES or model == self.base_id():
            return None
        try:  # a broken adapter is found here and refused by the engine, in a sentence
            return model if self.engines.session.adapter_folder(model).is_dir() else False
        except ValueError:  # not even a possible adapter name
            return False


def _mtime(path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def unknown(model: str) -> ApiError:
    return ApiError(
        404,
        f"the model {model!r} does not exist; GET /v1/models lists the base model "
        "and the adapters on the shelf",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


def gone(alias: str, version: str) -> ApiError:
    return ApiError(
        404,
        f"the alias {alias!r} sent this request to {version!r}, which is no longer "
        "on the shelf; set the alias's split again",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


def model_card(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "tunedesk"}


def adapter_card(entry) -> dict:
    """An adapter in ``/v1/models``: whether it passed its release gate, the reasons it failed,
    and the support checks' floors with their figures."""
    status = entry_status(entry)
    return {
        **model_card(entry.name),
        "tunedesk_release_gate": {
            "state": status.state,
            "reasons": status.reasons,
            "floors": status.floors,
            "eval_id": status.eval_id,
        },
    }


def alias_card(name: str, split: dict) -> dict:
    """An alias in ``/v1/models``: its versions and their weights (percent of new conversations)."""
    return {**model_card(name), "tunedesk_alias": {"versions": dict(split)}}
