"""The OpenAI-compatible HTTP API: ``GET /v1/models`` and ``POST /v1/chat/completions``
(aliases: :mod:`serve.alias_api`; the knowledge shelf's search: :mod:`serve.knowledge_api`).

``model`` is an adapter's name on the shelf or the base model (its name, or ``base``). Answers
come from :class:`serve.engines.Engines` (every request names its own adapter, so
concurrent requests never see each other's), streamed as server-sent events in OpenAI's chunk
format when ``stream`` is true. Errors use OpenAI's shape, ``{"error": {"message", "type",
"param", "code"}}``, with 400 (bad request), 401 (API key), 404 (unknown model), 429 (too
many ratings from one key, with ``Retry-After``: ``serve/rate_limit.py``), 503
(queue full, server stopping), 504 (no progress within the answer's bound,
``serve/interface/bounds.py``), 413 (body over ``TUNEDESK_API_MAX_BODY`` bytes,
refused before it is read
whole). With keys set (:mod:`serve.keys`), every route asks for ``Authorization: Bearer <key>``:
a chat key for the answers, feedback and models, an admin key for the aliases and ``/metrics``
(llama-server's Prometheus counters, one ``upstream`` label each); a chat key there gets 403.

Every answer names the engine and weights that produced it (``system_fingerprint`` and the
``X-TuneDesk-Engine`` response header); a request may pin one with the same header
(``llama.cpp`` or ``pytorch``), else :class:`~serve.engines.Engines` routes it by the load.

``response_format`` (JSON schema) is honoured by the llama.cpp engine (grammar-constrained
decoding). A request with ``tools`` goes, checked and normalised, to llama-server's own chat
endpoint, which renders the tools into the model's template and parses tool calls; its answer
is relayed with TuneDesk's own id and kept for ``/v1/feedback`` as any answer is. Text
spelling a control token of the model (``<|im_start|>`` ...) is refused (400) in every
message form and on every engine path, before any engine sees it.
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from adapters.shelf.aliases import aliases_path
from adapters.shelf.store import Shelf
from core.templates import control_sentence, first_control
from feedback.store import FeedbackStore
from inference.generate import PromptTooLong, context_limit
from serve.alias_api import AliasApi
from serve.aliases import CONVERSATION_HEADER, VERSION_HEADER, AliasRouter, Pick
from serve.answer_check import checked, sent_counts
from serve.answer_check import header as check_header
from serve.api_basics import (  # noqa: F401 (the limit, re-exported)
    ANY_METHOD,
    MAX_BODY_BYTES,
    ApiError,
    engine_failure,
    no_route_error,
    read_json,
)
from serve.auto_rollback import CHECK_EVERY_S, AutoRollback
from serve.engines import PINS, label, release_with
from serve.feedback_api import FeedbackApi
from serve.grounding import CONTEXT_TOKENS
from serve.grounding import apply as apply_grounding
from serve.grounding import header as grounding_header
from serve.interface.bounds import AnswerTimeout, answer_bound
from serve.interface.ticket import EngineRefused, ServerBusy
from serve.keys import ADMIN, CHAT, Caller, KeyRing, as_ring
from serve.knowledge_api import KnowledgeApi
from serve.llama_server.relay import relay_tools, upstream_metrics
from serve.model_list import ShelfModels, adapter_card, alias_card, gone, model_card, unknown
from serve.requests import (
    ChatRequest,
    RequestError,
    check_token_path,
    message_texts,
    parse_chat,
    relay_body,
)
from serve.streaming import (
    Tally,
    bounded,
    llama_deltas,
    new_answer_id,
    response_head,
    sse_events,
    ticket_deltas,
    usage,
)
from serve.version_stats import VersionStats

PIN_HEADER = "X-TuneDesk-Engine"  # a request pins an engine with it; every answer names its own
# Failures that are no version's: the asker's (a bad request, a conversation longer than the
# engine reads, a request llama-server refuses as asked) or the server's load (a full queue).
# An automatic rollback reads the errors, so a client's huge prompts must never count.
NOT_COUNTED = (RequestError, PromptTooLong, EngineRefused, ServerBusy)
log = logging.getLogger("tunedesk.serve")


class OpenAIServer(ShelfModels):
    """The routes over one :class:`~serve.engines.Engines`.

    Args:
        engines: what answers (holds the model session).
        api_key: who may call (:mod:`serve.keys`): a :class:`~serve.keys.KeyRing` of named
            chat and admin keys, one key (a chat key named ``api-key``), or None (no key asked).
        feedback: where answers are remembered (and, when it logs, kept) for ``/v1/feedback``
            (default: a store of the home folder that logs no conversation).
        stats: where each version's live figures go (default: a new one; the app shares its
            own with the Adapters tab).
        auto_rollback_every_s: seconds between the automatic rollback's checks at least (0: at
            every alias request and rating).
    """

    def __init__(
        self,
        engines,
        api_key: KeyRing | str | None = None,
        feedback: FeedbackStore | None = None,
        stats: VersionStats | None = None,
        auto_rollback_every_s: float = CHECK_EVERY_S,
    ):
        self.engines, self.keys = engines, as_ring(api_key)
        self.feedback = feedback or FeedbackStore()
        self._warned: set[tuple[str, str]] = set()  # (adapter, weights hash) warned about
        self._gate_seen: dict[
            str, tuple | None
        ] = {}  # adapter -> its files' mtimes when last looked at
        # per version: counts, timings; in the store, so every replica sharing it sees them
        self.stats = stats if stats is not None else VersionStats(store=self.feedback.store)
        self._aliases: AliasRouter | None = None
        self._aliases_lock = threading.Lock()
        self.auto_rollback = AutoRollback(self, auto_rollback_every_s)

    def router(self) -> APIRouter:
        """The FastAPI routes (mount with ``app.include_router`` or ``FastAPI(routes=...)``)."""
        router = APIRouter()
        router.add_api_route("/v1/models", self._models, methods=["GET"])
        router.add_api_route("/v1/models/{model_id:path}", self._model, methods=["GET"])
        router.add_api_route("/v1/chat/completions", self._chat, methods=["POST"])
        router.add_api_route("/metrics", self._metrics, methods=["GET"])
        AliasApi(self).add_to(router)
        FeedbackApi(self).add_to(router)
        KnowledgeApi(self).add_to(router)
        known = list(router.routes)

        async def no_route(request: Request, rest: str):  # last: what no route above takes
            return no_route_error(request, known).response()

        router.add_api_route("/v1/{rest:path}", no_route, methods=list(ANY_METHOD))
        return router

    # -- routes ---------------------------------------------------------------------------

    async def _models(self, request: Request):
        try:
            self.check_key(request)
            cards = await run_in_threadpool(self.model_cards)
        except ApiError as err:
            return err.response()
        return {"object": "list", "data": cards}

    async def _model(self, request: Request, model_id: str):
        try:
            self.check_key(request)
            split = self.aliases.splits().get(model_id)
            if split is not None:
                return alias_card(model_id, split)
            adapter = await run_in_threadpool(self.resolve_model, model_id)
            if adapter is False:
                raise unknown(model_id)
        except ApiError as err:
            return err.response()
        entry = None if adapter is None else await run_in_threadpool(self.shelf().get, adapter)
        return adapter_card(entry) if entry is not None and entry.ok else model_card(model_id)

    async def _chat(self, request: Request):
        started = time.perf_counter()
        try:
            caller = self.check_key(request)
            chat = parse_chat(await read_json(request))
            chat.asked_by = caller.name
            conversation = chat.body.get("user") or request.headers.get(CONVERSATION_HEADER)
            # One trip to a worker thread for every check before the answer: each trip is a
            # wake-up on cores llama-server is decoding on, before the first token.
            adapter, engine, release, prepared, pick = await run_in_threadpool(
                self._admit, chat, _pin(request, chat), conversation
            )
            pick.started = started
            try:
                return await self._answer(chat, engine, release, adapter, prepared, pick)
            except BaseException as err:
                release()
                self._count_failure(pick, err)
                raise
        except RequestError as err:
            return ApiError(400, str(err), "invalid_request_error", param=err.param).response()
        except ServerBusy as err:
            return ApiError(503, str(err), "server_busy", "server_busy").response()
        except (PromptTooLong, EngineRefused, AnswerTimeout) as err:  # 400 naming the field
            return engine_failure(err).response()
        except ValueError as err:  # an unusable adapter, a prompt too long: named in a sentence
            return ApiError(400, str(err), "invalid_request_error").response()
        except ApiError as err:
            return err.response()
        except Exception as err:  # the engine failed: said in OpenAI's error shape, not a bare 500
            log.exception("a chat answer failed")
            return engine_failure(err).response()

    def _admit(self, chat: ChatRequest, pin: str | None, conversation: str | None = None):
        """(adapter, engine, release, prepared llama.cpp request or None, pick) for one chat:
        the model resolved (an alias's version picked, after the automatic rollback had its
        look), the gate looked at, the engine routed (this may wait its turn). The pick names
        the version the answer is counted as; its ``alias`` is None for a model asked by name."""
        # Every text of every message form, before any engine sees it (issue 56).
        at = first_control(self.engines.session.tokenizer, message_texts(chat))
        if at is not None:
            raise RequestError(control_sentence(at), at)
        if chat.model in self.aliases.splits():
            self.auto_rollback.maybe_check()
        pick = self.aliases.pick(chat.model, conversation)
        try:
            adapter, *routed = self._route(
                chat, pin, pick.version if pick else chat.model, pick.alias if pick else None
            )
        except BaseException as err:
            self._count_failure(pick or self._direct(chat.model), err)
            raise
        return (adapter, *routed, pick or Pick(None, adapter or "base"))

    def _direct(self, model: str) -> Pick | None:
        """The pick of a model asked by name, when it is the base or an adapter's folder."""
        adapter = self.resolve_model(model)
        return None if adapter is False else Pick(None, adapter or "base")

    def _count_failure(self, pick: Pick | None, err: BaseException) -> None:
        """Count a version's failure to answer (not a bad request, a prompt too long, a full
        queue or a client hanging up) in its stats."""
        if pick is not None and isinstance(err, Exception) and not isinstance(err, NOT_COUNTED):
            self.stats.record(pick.version, "error")

    def _route(self, chat: ChatRequest, pin: str | None, model: str, alias: str | None = None):
        """(adapter, engine, release, prepared llama.cpp request or None) for ``model`` (a
        version of ``alias`` when given: grounded as the alias says)."""
        adapter = self.resolve_model(model)
        if adapter is False:
            raise unknown(model) if model == chat.model else gone(chat.model, model)
        if adapter is not None:
            self.warn_if_not_passed(adapter)
        # before any engine sees it; an alias's own grounding when asked through one
        chat.grounding = apply_grounding(
            chat,
            adapter,
            self.shelf(),
            alias,
            self.aliases.grounding(alias) if alias else None,
            self.context_tokens(),
            self.engines.session.tokenizer,
        )
        if (
            pin is None
            and (chat.tools or chat.json_schema is not None)
            and self.engines.llama() is not None
        ):
            pin = "llama.cpp"  # only llama.cpp follows tools and schemas
        if not (chat.tools and pin == "llama.cpp"):  # the token-id path: TuneDesk renders it
            check_token_path(chat)
        try:
            engine, release = self.engines.route([adapter], pin)
        except ValueError as err:
            raise RequestError(str(err), PIN_HEADER) from None
        if getattr(engine, "name", "") != "llama.cpp" or chat.tools:
            return adapter, engine, release, None
        try:
            return (
                adapter,
                engine,
                release,
                engine.prepare(chat.messages, adapter, chat.settings, chat.stop, chat.json_schema),
            )
        except BaseException:
            release()
            raise

    async def _answer(
        self,
        chat: ChatRequest,
        engine,
        release,
        adapter: str | None,
        prepared=None,
        pick: Pick | None = None,
    ):
        """The response of a routed request; ``release`` runs when its answer has ended.
        ``pick``: the version it answers as (timed in the stats; named in the answer when an
        alias chose it)."""
        is_llama = getattr(engine, "name", "") == "llama.cpp"
        if chat.tools and is_llama:
            return await self._relay(chat, engine, release, adapter, pick)
        if chat.json_schema is not None and not is_llama:
            raise RequestError(
                "'response_format' needs the llama.cpp engine, which does not serve "
                f"here ({self.engines.llama_error or 'set to pytorch'})",
                "response_format",
            )
        if is_llama:  # relayed straight, no thread per answer
            answer = Tally(prepared.prompt_tokens, label(engine))
            deltas = llama_deltas(
                engine, prepared, answer, release, stopping=getattr(self.engines, "stopping", None)
            )
            release_with(deltas, release)
        else:
            ticket = await run_in_threadpool(
                self.engines.submit,
                chat.messages,
                adapter,
                chat.settings,
                chat.stop,
                chat.json_schema,
                routed=(engine, release),
            )
            answer, deltas = ticket, ticket_deltas(ticket)
        head = response_head(chat, answer)
        headers = {
            PIN_HEADER: answer.engine,
            VERSION_HEADER: adapter or "base",
            **grounding_header(chat.grounding),
        }
        if (
            pick is not None and pick.alias is not None
        ):  # the answer says which version of the alias gave it
            head["system_fingerprint"] = f"{answer.engine}; {pick.version}"
        if pick is not None:
            deltas = self.stats.timed(pick.version, deltas, pick.started, None, NOT_COUNTED)
        check = None
        if pick is not None and pick.alias and self.aliases.checked(pick.alias):  # whole, then sent
            try:
                check, deltas = await checked(
                    deltas, chat.messages, chat.grounding, adapter, self.shelf()
                )
            except Exception as err:
                return engine_failure(err).response()
            headers.update(check_header(check))
            # a replaced text ends and counts as itself, streamed or not
            answer = sent_counts(answer, check, self.engines.session.tokenizer)

        def remember(text: str) -> None:  # after the answer: nothing here delays a token
            version = self.engines.weights_hash(adapter)
            self.feedback.record(
                head["id"],
                adapter or "base",
                version,
                answer.engine,
                chat.messages,
                text,
                grounding=chat.grounding,
                check=check.record() if check else None,
                asked_by=chat.asked_by,
            )

        grounded = {"tunedesk_grounding": chat.grounding} if chat.grounding else {}
        if check is not None:
            grounded["tunedesk_check"] = check.record()
        if chat.stream:  # the finish chunk carries them, as the whole answer's body does
            return StreamingResponse(
                sse_events(deltas, answer, head, chat, remember, grounded),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
            )
        try:
            text = "".join([delta async for delta in deltas])
        except Exception as err:
            return engine_failure(err).response()
        try:
            await run_in_threadpool(remember, text)
        except Exception:  # the answer is made: it costs the vote, not the answer (as streamed)
            log.exception("an answer could not be kept for /v1/feedback")
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": answer.finish_reason,
            "logprobs": None,
        }
        return JSONResponse(
            {
                **head,
                "object": "chat.completion",
                "choices": [choice],
                "usage": usage(answer),
                **grounded,
            },
            headers=headers,
        )

    async def _relay(self, chat: ChatRequest, engine, release, adapter: str | None, pick: Pick):
        """A tool-calling request relayed to llama-server: named, bounded, kept for
        ``/v1/feedback`` and counted in ``pick``'s version's figures as every answer is (a
        failure llama-server answers, 5xx, is an error; a request it refuses, 4xx, is not
        counted, as a bad request here is not)."""
        stopping = getattr(self.engines, "stopping", None)
        answer_id = new_answer_id()

        def remember_tools(message: dict) -> None:  # votable by its id, as any answer
            self.feedback.record(
                answer_id,
                adapter or "base",
                self.engines.weights_hash(adapter),
                label(engine),
                chat.messages,
                message["content"],
                tool_calls=message["tool_calls"],
                asked_by=chat.asked_by,
            )

        response = await relay_tools(
            engine,
            relay_body(chat),
            chat.stream,
            chat.model,
            adapter,
            bounded=lambda parts: bounded(parts, answer_bound(), stopping),
            answer_id=answer_id,
            remember=remember_tools,
            timed=lambda events, whole: self.stats.timed(
                pick.version, events, pick.started, whole, NOT_COUNTED
            ),
        )
        release()  # counted until llama-server has it (a relayed stream is its own)
        if not isinstance(response, StreamingResponse):  # a stream counts itself as it ends
            if response.status_code < 400:  # whole: no first token known
                self.stats.record(pick.version, "ok", None, time.perf_counter() - pick.started)
            elif response.status_code >= 500:
                self.stats.record(pick.version, "error")
        response.headers[VERSION_HEADER] = adapter or "base"
        response.headers[PIN_HEADER] = label(engine)
        return response

    async def _metrics(self, request: Request):
        from fastapi.responses import PlainTextResponse

        try:
            self.check_key(request, ADMIN)
        except ApiError as err:
            return err.response()
        engine = self.engines.llama()
        text = await run_in_threadpool(upstream_metrics, engine) if engine is not None else ""
        return PlainTextResponse(text or "# llama.cpp is not serving; no metrics\n")

    # -- helpers --------------------------------------------------------------------------

    def shelf(self) -> Shelf:
        """The session's shelf (the home it was started in)."""
        shelf = Shelf()
        shelf.root = self.engines.session.adapter_folder("probe").parent
        shelf.home = shelf.root.parent
        return shelf

    @property
    def aliases(self) -> AliasRouter:
        """The home's aliases, watched by stamp (built at first use, once the home is known)."""
        if self._aliases is None:
            with self._aliases_lock:
                if self._aliases is None:
                    self._aliases = AliasRouter(aliases_path(self.shelf().home))
        return self._aliases

    def context_tokens(self) -> int:
        """What a grounded prompt may fill: a llama-server slot's context, or less where the
        model reads fewer positions."""
        limit = context_limit(self.engines.session)
        return min(CONTEXT_TOKENS, limit) if limit else CONTEXT_TOKENS

    def check_key(self, request: Request, role: str = CHAT) -> Caller:
        """Who sent ``request``; refused (401) without a key of this server, when it has keys,
        and (403) with a chat key where ``role`` is admin."""
        return self.keys.caller(request, role)


def _pin(request: Request, chat: ChatRequest) -> str | None:
    """The engine the request pins with the ``X-TuneDesk-Engine`` header, if any.

    Raises:
        RequestError: the header names no engine.
    """
    pin = request.headers.get(PIN_HEADER)
    if pin is None:
        return None
    pin = pin.strip()
    if pin not in PINS:
        raise RequestError(
            f"header {PIN_HEADER} must be one of {', '.join(PINS)}, got {pin[:40]!r}", PIN_HEADER
        )
    return pin
