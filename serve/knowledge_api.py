"""The knowledge shelf's read routes, behind the same bearer key as the rest of ``/v1``.

- ``GET /v1/knowledge``: every knowledge base and its newest version;
- ``GET /v1/knowledge/search?q=...&k=3&knowledge=NAME&version=latest``: the ``k`` passages
  that best match ``q`` (BM25), each with its id and score, and the version they come from.

An unknown knowledge base or version answers 404, a bad query or ``k`` 400, in OpenAI's error
shape. The searches are :func:`knowledge.actions.search`, the CLI's and the Knowledge tab's.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from knowledge import actions
from knowledge.store import KnowledgeNotFound
from serve.api_basics import ApiError


class KnowledgeApi:
    """The knowledge routes over one API server (its key).

    Args:
        server: anything with ``check_key(request)`` (:class:`serve.openai_api.OpenAIServer`).
    """

    def __init__(self, server):
        self.server = server

    def add_to(self, router: APIRouter) -> None:
        """Add the routes to ``router``."""
        router.add_api_route("/v1/knowledge", self._list, methods=["GET"])
        router.add_api_route("/v1/knowledge/search", self._search, methods=["GET"])

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

    async def _guarded(self, request: Request, work):
        try:
            self.server.check_key(request)
            return await run_in_threadpool(work)
        except ApiError as err:
            return err.response()
        except KnowledgeNotFound as err:
            return ApiError(
                404, str(err), "invalid_request_error", "knowledge_not_found", "knowledge"
            ).response()
        except ValueError as err:
            return ApiError(400, str(err), "invalid_request_error").response()
