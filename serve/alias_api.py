"""The aliases' admin routes: an admin key (:mod:`serve.keys`) is needed for every one; a chat
key gets 403.

- ``GET /v1/aliases``: every alias and its split;
- ``GET /v1/aliases/{name}``: one alias, each version's release gate, its last changes;
- ``PUT /v1/aliases/{name}``: ``{"versions": {"v3": 90, "v4": 10}, "force": false,
  "reason": "...", "auto_rollback": {"margin": 0.1, "min_requests": 50,
  "min_ratings": 10}, "grounding": "faq@v2", "check": "on"}`` sets the split (creates the
  alias); ``auto_rollback`` (null: off), ``grounding`` (``off``, ``auto``, ``NAME[@vN]``, a
  knowledge version that must be on the shelf) and ``check`` (``on`` or ``off``: answers checked
  before they are sent, :mod:`serve.answer_check`) may come alone, keeping the split, and are
  kept as they are when left out;
- ``POST /v1/aliases/{name}/promote``: ``{"version": "v4", ...}``; ``.../rollback``: ``{}``;
- ``DELETE /v1/aliases/{name}``;
- ``GET /v1/aliases/{name}/stats``: each version's live figures (:mod:`serve.version_stats`).

A refused change answers 400 in OpenAI's error shape, ``param`` naming the field
(``versions.v4`` for a version whose gate has not passed; the field holding a lone surrogate);
an unknown alias 404. The changes
are the CLI's (:class:`adapters.shelf.aliases.AliasBook`), audited alike; the audit's ``by`` is
the admin key's name (``api (<client address>)`` on a server without keys), never what the
client writes: a body naming ``by`` is refused.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from adapters.alias_actions import change_sentence
from adapters.shelf.alias_rules import AliasError, check_grounding, split_grounding
from adapters.shelf.aliases import KEEP, AliasBook, AliasNotFoundError, grounding_of
from adapters.shelf.gate_rules import entry_status
from core.user_text import replace_invalid, unicode_problem
from knowledge.store import KnowledgeShelf
from serve.api_basics import ApiError, read_json
from serve.keys import ADMIN
from serve.requests import RequestError
from serve.version_stats import thumbs

BODY_FIELDS = {"versions", "version", "force", "reason", "auto_rollback", "check", "grounding"}


class AliasApi:
    """The admin routes over one API server (its key, shelf, live stats and feedback).

    Args:
        server: the :class:`serve.openai_api.OpenAIServer` these routes belong to.
    """

    def __init__(self, server):
        self.server = server

    def add_to(self, router: APIRouter) -> None:
        """Add the routes to ``router``."""
        router.add_api_route("/v1/aliases", self._list, methods=["GET"])
        router.add_api_route("/v1/aliases/{name}", self._show, methods=["GET"])
        router.add_api_route("/v1/aliases/{name}", self._set, methods=["PUT"])
        router.add_api_route("/v1/aliases/{name}", self._delete, methods=["DELETE"])
        router.add_api_route("/v1/aliases/{name}/promote", self._promote, methods=["POST"])
        router.add_api_route("/v1/aliases/{name}/rollback", self._rollback, methods=["POST"])
        router.add_api_route("/v1/aliases/{name}/stats", self._stats, methods=["GET"])

    def book(self) -> AliasBook:
        return AliasBook(self.server.shelf())

    # -- routes ---------------------------------------------------------------------------

    async def _list(self, request: Request):
        return await self._guarded(
            request,
            None,
            lambda _body: {
                "object": "list",
                "data": [
                    {"id": name, "object": "alias", "versions": split}
                    for name, split in self.book().all().items()
                ],
            },
        )

    async def _show(self, request: Request, name: str):
        return await self._guarded(request, None, lambda _body: self.card(name))

    async def _stats(self, request: Request, name: str):
        return await self._guarded(request, None, lambda _body: self.stats(name))

    async def _set(self, request: Request, name: str):
        def put(body):
            if not {"versions", "auto_rollback", "check", "grounding"} & set(body):
                raise RequestError(
                    "'versions' is required (or 'auto_rollback', 'check' or "
                    "'grounding' alone, keeping the split)",
                    "versions",
                )
            grounding = body.get("grounding", KEEP)
            if grounding is not KEEP:
                grounding = known_grounding(grounding)
            return _said(
                self.book().set(
                    name,
                    body.get("versions"),
                    **_who(request, body),
                    auto_rollback=body.get("auto_rollback", KEEP),
                    check=body.get("check", KEEP),
                    grounding=grounding,
                )
            )

        return await self._guarded(request, (), put)

    async def _promote(self, request: Request, name: str):
        return await self._guarded(
            request,
            ("version",),
            lambda body: _said(self.book().promote(name, body["version"], **_who(request, body))),
        )

    async def _rollback(self, request: Request, name: str):
        return await self._guarded(
            request, (), lambda body: _said(self.book().rollback(name, **_who(request, body)))
        )

    async def _delete(self, request: Request, name: str):
        return await self._guarded(
            request, None, lambda _body: _said(self.book().delete(name, by=_who(request, {})["by"]))
        )

    # -- what they answer -----------------------------------------------------------------

    def card(self, name: str) -> dict:
        """One alias: its split, each version's gate state, its last 20 changes."""
        book = self.book()
        row = book.row(name)
        split = row["versions"]
        gates = {}
        for version in split:
            try:
                gates[version] = entry_status(book.shelf.get(version)).state
            except ValueError:
                gates[version] = "missing"
        return {
            "id": name,
            "object": "alias",
            "versions": split,
            "release_gates": gates,
            "since": row.get("since") or row.get("updated"),
            "auto_rollback": row.get("auto_rollback"),
            "check": row.get("check", "off"),
            "grounding": grounding_of(row),
            "history": book.history(name)[-20:],
        }

    def stats(self, name: str) -> dict:
        """Each version of alias ``name``: live figures and its thumbs-down rate."""
        split = self.book().get(name)
        ratings = self.server.feedback.ratings()
        versions = {}
        for version, weight in split.items():
            try:
                weights = self.server.engines.weights_hash(version)
            except ValueError:  # deleted since: no ratings can be its
                weights = ""
            versions[version] = {
                "weight": weight,
                "weights_hash": weights,
                **self.server.stats.summary(version),
                **thumbs(ratings, version, weights),
            }
        return {"id": name, "object": "alias.stats", "versions": versions}

    # -- plumbing -------------------------------------------------------------------------

    async def _guarded(self, request: Request, required, work):
        """``work(body)`` in a worker thread, its refusals as OpenAI-shaped errors; ``required``:
        the body's required fields (None: no body is read)."""
        try:
            caller = self.server.check_key(request, ADMIN)
            request.state.caller = caller.name  # the audit's "by" (see _who)
            body = (
                None if required is None else _checked(await read_json(request, empty={}), required)
            )
            return await run_in_threadpool(work, body)
        except ApiError as err:
            return err.response()
        except AliasNotFoundError as err:
            return ApiError(
                404, str(err), "invalid_request_error", "alias_not_found", err.param
            ).response()
        except (AliasError, RequestError) as err:
            return ApiError(400, str(err), "invalid_request_error", param=err.param).response()
        except ValueError as err:  # the shelf's own sentences
            return ApiError(400, str(err), "invalid_request_error").response()


def known_grounding(value) -> str:
    """An alias's new grounding, checked: its spelling, and a named knowledge version on the shelf.

    Raises:
        AliasError: bad spelling, or a knowledge base or version that is not there.
    """
    value = check_grounding(value)
    named = split_grounding(value)
    if named is not None:
        try:
            KnowledgeShelf().get(*named)
        except ValueError as err:
            raise AliasError(f"grounding: {err}", "grounding") from None
    return value


def _checked(body, required) -> dict:
    """The JSON body of a change: an object, known fields of the right types, the required ones."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if "by" in body:
        raise RequestError(
            "'by' is not taken: the audit names the admin key that made the change", "by"
        )
    unknown = sorted(set(body) - BODY_FIELDS)
    if unknown:
        name = replace_invalid(unknown[0])[:64]  # named in the answer, which must encode
        raise RequestError(f"unknown field {name!r}; known: {', '.join(sorted(BODY_FIELDS))}", name)
    # a lone surrogate neither encodes in the answer naming it nor in the audit: a 500 before
    bad = next((key for key, value in body.items() if _holds_invalid(value)), None)
    if bad is not None:
        raise RequestError(
            f"{bad!r} holds a character that is not valid Unicode (a lone surrogate); remove it",
            bad,
        )
    for key in required:
        if key not in body:
            raise RequestError(f"{key!r} is required", key)
    if not isinstance(body.get("force", False), bool):
        raise RequestError("'force' must be true or false", "force")
    for key in ("reason", "version"):
        if not isinstance(body.get(key, ""), str):
            raise RequestError(f"{key!r} must be a string", key)
    return body


def _holds_invalid(value) -> bool:
    """Whether ``value`` holds text UTF-8 cannot encode, in a key or a value at any depth."""
    if isinstance(value, str):
        return unicode_problem(value) is not None
    if isinstance(value, dict):
        return any(_holds_invalid(k) or _holds_invalid(v) for k, v in value.items())
    return isinstance(value, list) and any(_holds_invalid(v) for v in value)


def _said(row: dict) -> dict:
    """A change's answer: its audit row and the sentence the CLI prints."""
    return {"object": "alias.change", **row, "message": change_sentence(row)}


def _who(request: Request, body: dict) -> dict:
    """Who changes it (the admin key's name, else the client's address) and the gate override
    asked for."""
    client = request.client.host if request.client else "unknown"
    return {
        "by": getattr(request.state, "caller", None) or f"api ({client})",
        "force": body.get("force", False),
        "reason": body.get("reason", ""),
    }
