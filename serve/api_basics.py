"""What every API route shares: OpenAI's error shape (an engine's failure too) and a JSON
body read within limits (at most ``TUNEDESK_API_MAX_BODY`` bytes, refused while it is read; at
most :data:`MAX_DEPTH` levels deep). Who may call is :mod:`serve.keys`."""

from __future__ import annotations

import json
import os

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse

from core.llama_cpp.process import LlamaServerError
from core.user_text import shown_error
from inference.generate import PromptTooLong
from serve.interface.bounds import AnswerTimeout, EngineStopping
from serve.interface.ticket import EngineRefused
from serve.requests import RequestError

MAX_BODY_BYTES = int(os.environ.get("TUNEDESK_API_MAX_BODY", str(1 << 20)))
MAX_DEPTH = 32  # JSON nesting a chat request needs is 5; deeper is refused


class ApiError(Exception):
    """An error answer: HTTP status plus OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.status, self.kind, self.code, self.param = status, kind, code, param
        if retry_after is None and status == 503:
            retry_after = 1
        self.retry_after = retry_after

    def response(self) -> JSONResponse:
        body = {
            "error": {
                "message": str(self),
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return JSONResponse(body, status_code=self.status, headers=headers)


def engine_failure(err: Exception) -> ApiError:
    """The error answer for an engine that failed to answer: 504 when it ran past the answer's
    bound (``serve/interface/bounds.py``), 503 when the server is stopping, 502 when
    llama-server did not answer or could not start, 400 when it refused the request as asked
    or the conversation is longer than the engine reads (``param`` messages), else 500; the
    cause is named either way."""
    if isinstance(err, PromptTooLong):  # OpenAI's code for it, so clients can tell it apart
        return ApiError(
            400, str(err), "invalid_request_error", "context_length_exceeded", "messages"
        )
    if isinstance(err, EngineRefused):
        return ApiError(400, str(err), "invalid_request_error", param=err.param)
    if isinstance(err, AnswerTimeout):
        return ApiError(504, str(err), "timeout", "answer_timeout")
    if isinstance(err, EngineStopping):
        return ApiError(503, str(err), "server_error", "server_stopping")
    if isinstance(err, httpx.HTTPError | LlamaServerError):  # off localhost: no class, no path
        return ApiError(
            502,
            shown_error(f"llama-server did not answer: {type(err).__name__}: {err}"),
            "server_error",
        )
    return ApiError(
        500, shown_error(f"the answer failed: {type(err).__name__}: {err}"), "server_error"
    )


ANY_METHOD = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def no_route_error(request: Request, routes: list) -> ApiError:
    """OpenAI's error for a ``/v1`` path no route serves: 405 naming the methods a route takes
    there, else 404."""
    path = request.url.path
    allowed = sorted(
        {
            method
            for route in routes
            if getattr(route, "path_regex", None) is not None and route.path_regex.match(path)
            for method in getattr(route, "methods", None) or ()
        }
    )
    if allowed:
        return ApiError(
            405,
            f"{request.method} is not allowed on {path[:200]}; it takes {', '.join(allowed)}",
            "invalid_request_error",
            "method_not_allowed",
        )
    return ApiError(
        404,
        f"no route {path[:200]} here; the API's routes are in docs/serving.md",
        "invalid_request_error",
        "not_found",
    )


async def read_json(request: Request, empty=None):
    """The body as JSON, read at most ``MAX_BODY_BYTES`` far and at most ``MAX_DEPTH`` deep
    (``empty``, when not None: what an empty body stands for).

    Raises:
        ApiError: 413 for a body too large.
        RequestError: not JSON, or nested too deep.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY_BYTES:
            raise _too_large()
    if not body and empty is not None:
        return empty
    try:
        data = json.loads(body)
    except RecursionError:
        raise RequestError(f"the request body is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise RequestError("the request body is not valid JSON") from None
    if _depth(data) > MAX_DEPTH:
        raise RequestError(f"the request body is nested deeper than {MAX_DEPTH} levels")
    return data


def _too_large() -> ApiError:
    return ApiError(
        413,
        f"the request body is over {MAX_BODY_BYTES:,} bytes; send a shorter conversation",
        "invalid_request_error",
        "request_too_large",
    )


def _depth(data) -> int:
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend(
                    (child, level + 1)
                    for child in (node.values() if isinstance(node, dict) else node)
                )
    return deepest
