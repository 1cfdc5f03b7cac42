"""The knowledge shelf's read routes, behind the same bearer key as the rest of ``/v1``.

- ``GET /v1/knowledge``: every knowledge base and its newest version;
- ``GET /v1/knowledge/search?q=...&k=3&knowledge=NAME&version=latest``: the ``k`` passages
  that best match ``q`` (BM25), each with its id and score, and the version they come from.

- ``POST /v1/knowledge/warm`` (an *admin* key): ``{"model": "support", "max_passages": 800}``
  reads the knowledge a model's grounded answers use into llama-server's prompt cache, so the
  first customers' grounded answers start as fast as later ones
  (:mod:`serve.knowledge_warmup`). ``model`` is an alias (each of its versions, grounded as the
  alias says) or a model asked by name with ``knowledge`` as a chat request gives it
  (``"auto"``, a name, or ``{"name", "version"}``); ``budget_mib`` caps the cache each version
  fills (default: three quarters of the server's); ``system_prompt`` is the one the answers
  will carry (default none, as ``/v1`` has), checked as a chat message's text is (no control
  token of the model spelled, no lone surrogate). It answers when the reading is done, with what was
  read per version. ``keep`` (default true) keeps the request, so it is read again whenever a
  llama-server starts (:mod:`serve.warm_keeper`); false warms once and forgets a kept one.
  Any other field is refused, named (a misspelt bound would warm everything, and be kept).
- ``GET /v1/knowledge/warm`` (admin): the kept warm-ups and what the last replay did;
  ``DELETE /v1/knowledge/warm/{model}`` forgets one.

An unknown knowledge base or version answers 404, a bad query or ``k`` 400 naming ``q`` or
``k``, in OpenAI's error shape. The searches are :func:`knowledge.actions.search`, the CLI's
and the Knowledge tab's.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from core.templates import control_sentence, first_control
from core.user_text import check_unicode, quote, replace_invalid
from knowledge import actions
from knowledge.store import LATEST, KnowledgeNotFound, KnowledgeShelf
from serve.api_basics import ApiError, read_json
from serve.grounding import asked_grounding
from serve.keys import ADMIN, CHAT
from serve.knowledge_warmup import warm
from serve.requests import RequestError
from serve.warm_keeper import WarmKeeper

INVALID = "invalid_request_error"
WARM_FIELDS = ("model", "knowledge", "max_passages", "budget_mib", "system_prompt", "keep")


class KnowledgeApi:
    """The knowledge routes over one API server (its key).

    Args:
        server: anything with ``check_key(request)`` (:class:`serve.openai_api.OpenAIServer`).
    """

    def __init__(self, server):
        self.server = server
        self.keeper = getattr(server, "warm_keeper", None)
        if self.keeper is None:  # one keeper per server, however many routers it makes
            self.keeper = WarmKeeper(server.feedback.store, self._warm_all, self._plans)
            server.warm_keeper = self.keeper
            listen = getattr(server.engines, "on_llama_start", None)
            if listen is not None:
                listen(self.keeper.replay_soon)

    def add_to(self, router: APIRouter) -> None:
        """Add the routes to ``router``."""
        router.add_api_route("/v1/knowledge", self._list, methods=["GET"])
        router.add_api_route("/v1/knowledge/search", self._search, methods=["GET"])
        router.add_api_route("/v1/knowledge/warm", self._warm, methods=["POST"])
        router.add_api_route("/v1/knowledge/warm", self._kept, methods=["GET"])
        router.add_api_route("/v1/knowledge/warm/{model:path}", self._forget, methods=["DELETE"])

    async def _list(self, request: Request):
        return await self._guarded(
            request, lambda: {"object": "list", "data": actions.version_rows()}
        )

    async def _search(
        self,
        request: Request,
        q: str = "",
        k: str = "3",
        knowledge: str = actions.DEFAULT_NAME,
        version: str = "latest",
    ):
        def work():
            try:
                count = int(k)
            except ValueError:
                raise ApiError(
                    400,
                    f"k must be a whole number from 1 to {actions.MAX_K}, not {k[:20]!r}",
                    "invalid_request_error",
                    param="k",
                ) from None
            return actions.search(q, knowledge, version, count)

        return await self._guarded(request, work)

    async def _warm(self, request: Request):
        try:
            self.server.check_key(request, ADMIN)
            body = await read_json(request)
        except ApiError as err:
            return err.response()
        except RequestError as err:  # not JSON, or nested too deep
            return ApiError(400, str(err), INVALID, param=err.param).response()

        def work():
            keep = body.get("keep", True) if isinstance(body, dict) else True
            if not isinstance(keep, bool):
                raise ApiError(400, "'keep' must be true or false", INVALID, param="keep")
            done = self._warm_all(body)
            if keep:
                self.keeper.keep(body)
            else:
                self.keeper.forget(body["model"])
            return {**done, "kept": keep}

        return await self._guarded(request, work, ADMIN)

    async def _kept(self, request: Request):
        return await self._guarded(
            request,
            lambda: {
                "object": "list",
                "data": self.keeper.rows(),
                "last_replay": self.keeper.last,
                "replaying": self.keeper.busy,
            },
            ADMIN,
        )

    async def _forget(self, request: Request, model: str):
        def work():
            if not self.keeper.forget(model):
                raise ApiError(404, f"no warm-up is kept for {model!r}", INVALID, param="model")
            return {"object": "knowledge.warm.deleted", "model": model, "deleted": True}

        return await self._guarded(request, work, ADMIN)

    def _warm_all(self, body) -> dict:
        """Each version the body's ``model`` names, warmed with the knowledge it answers from."""
        plans, max_passages, budget, system_prompt = self._plans(body)
        warmed = []
        for adapter, asked in plans:
            result = warm(
                self.server.engines,
                adapter,
                asked["name"],
                asked["version"],
                max_passages=max_passages,
                budget_mib=budget,
                system_prompt=system_prompt,
            )
            warmed.append({**result.to_dict(), "line": result.line()})
        return {"object": "knowledge.warm", "data": warmed}

    def _plans(self, body) -> tuple[list, int | None, float | None, str]:
        """``(plans, max_passages, budget_mib, system_prompt)`` of a warm-up request, each plan
        an ``(adapter, knowledge asked)`` of one version the ``model`` names: every version
        resolved before any is warmed, so a bad one costs no work.

        Raises:
            ApiError: a bad field, an unknown model or knowledge, a model that answers
                ungrounded.
        """
        session = getattr(self.server.engines, "session", None)
        model, max_passages, budget, system_prompt = warm_fields(
            body, getattr(session, "tokenizer", None)
        )
        split = self.server.aliases.splits().get(model)
        alias = model if split is not None else None
        versions = sorted(split) if split is not None else [model]
        plans = []
        for version in versions:
            adapter = self.server.resolve_model(version)
            if adapter is False:
                raise ApiError(404, f"no model named {version!r} here", INVALID, param="model")
            try:
                asked = asked_grounding(
                    body.get("knowledge"),
                    adapter,
                    self.server.shelf(),
                    alias,
                    self.server.aliases.grounding(alias) if alias else None,
                )
            except RequestError as err:
                raise ApiError(400, str(err), INVALID, param=err.param) from None
            if asked is None:
                raise ApiError(
                    400,
                    f"{version} answers ungrounded "
                    + (f"(alias {alias!r} grounds off)" if alias else "(name its 'knowledge')")
                    + ": there is nothing to warm",
                    INVALID,
                    param="knowledge" if alias is None else "model",
                )
            try:  # the knowledge itself: a kept request that names none gone is never kept
                KnowledgeShelf().get(asked["name"], asked.get("version") or LATEST)
            except KnowledgeNotFound as err:
                raise ApiError(404, str(err), INVALID, "knowledge_not_found", "knowledge") from None
            plans.append((adapter, asked))
        return plans, max_passages, budget, system_prompt

    async def _guarded(self, request: Request, work, role: str = CHAT):
        try:
            self.server.check_key(request, role)
            return await run_in_threadpool(work)
        except ApiError as err:
            return err.response()
        except KnowledgeNotFound as err:
            return ApiError(
                404, str(err), "invalid_request_error", "knowledge_not_found", "knowledge"
            ).response()
        except actions.SearchError as err:
            return ApiError(400, str(err), "invalid_request_error", param=err.param).response()
        except ValueError as err:
            return ApiError(400, str(err), "invalid_request_error").response()


def warm_fields(body, tokenizer=None) -> tuple[str, int | None, float | None, str]:
    """``(model, max_passages, budget_mib, system_prompt)`` of a warm-up body, each checked.

    Args:
        body: the decoded JSON body.
        tokenizer: the served model's; its control tokens may not be spelled in the system
            prompt, as in any chat message (None: nothing to look for).

    Raises:
        ApiError: a 400 naming the first bad field (an unknown one too).
    """
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise ApiError(400, "'model' must be a model's or an alias's name", INVALID, param="model")
    try:  # as every other text field: a lone surrogate named, not looked up (nor kept)
        check_unicode(body["model"], "model")
    except ValueError as err:
        raise ApiError(400, str(err), INVALID, param="model") from None
    unknown = sorted(set(body) - set(WARM_FIELDS))
    if unknown:  # a misspelt bound would warm everything, and be kept so
        name = replace_invalid(unknown[0])[:64]  # named in the answer, which must encode
        raise ApiError(
            400,
            f"unknown field {quote(name)}; /v1/knowledge/warm takes "
            f"{', '.join(WARM_FIELDS[:-1])} and {WARM_FIELDS[-1]}",
            INVALID,
            param=name,
        )
    max_passages, budget = body.get("max_passages"), body.get("budget_mib")
    if max_passages is not None and (type(max_passages) is not int or max_passages < 1):
        raise ApiError(
            400,
            "'max_passages' must be a whole number of at least 1",
            INVALID,
            param="max_passages",
        )
    if budget is not None and (type(budget) not in (int, float) or not 0 < budget <= 2**20):
        raise ApiError(
            400, "'budget_mib' must be a number of MiB above 0", INVALID, param="budget_mib"
        )
    system_prompt = body.get("system_prompt", "")
    if not isinstance(system_prompt, str):
        raise ApiError(400, "'system_prompt' must be text", INVALID, param="system_prompt")
    try:  # the checks a chat request's texts get (serve/requests.py, OpenAIServer._admit)
        check_unicode(system_prompt, "system_prompt")
    except ValueError as err:
        raise ApiError(400, str(err), INVALID, param="system_prompt") from None
    if first_control(tokenizer, [("system_prompt", system_prompt)]) is not None:
        raise ApiError(400, control_sentence("system_prompt"), INVALID, param="system_prompt")
    return body["model"], max_passages, budget, system_prompt
