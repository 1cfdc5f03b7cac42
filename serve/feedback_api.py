"""``POST /v1/feedback``: a customer's or agent's rating of an answer served here, with an
optional correction and intent label, stored in the feedback store (one vote per answer and
rater: a second replaces the first, keeping a reviewer's correction and intent when it gives
none or the ones it gave before) and limited per key (:mod:`serve.rate_limit`: 429 with
``Retry-After``). A chat key rates only the answers served to it (:func:`may_rate`): another
client's answer is a 404, as an id never served is, so its ids cannot be tried out.
A correction or intent spelling a control token (the common chat templates', or the served
model's own) is a 400 naming it: it would reach the exported training data."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from core.templates import control_sentence, first_control
from feedback.store import ServedAnswer
from serve.api_basics import ApiError, read_json
from serve.keys import ADMIN, Caller
from serve.rate_limit import RateLimiter, check_feedback_rate, feedback_per_minute
from serve.requests import RequestError, parse_feedback

KEYLESS_RATER = "local"  # every caller of a server with no keys: one vote per answer among them


def may_rate(caller: Caller, served: ServedAnswer) -> bool:
    """Whether ``caller`` may rate ``served``: an answer of ``/v1`` by the key that asked for it
    (a support widget rates with its own key; anyone's, for an answer kept before its key
    was), and any answer by an admin key (a support lead's console) or on a server with no
    keys. The pages' Chat and Compare answers are rated there, not by a chat key."""
    if caller.role == ADMIN:
        return True
    asked_by = (served.extra or {}).get("asked_by")
    return served.source == "api" and asked_by in (None, caller.name)


class FeedbackApi:
    """The feedback route over one API server.

    Args:
        server: the :class:`serve.openai_api.OpenAIServer` (its key check, feedback store and
            automatic rollback).
    """

    def __init__(self, server):
        self.server = server
        if getattr(server, "feedback_limit", None) is None:  # one per server, however many routers
            server.feedback_limit = RateLimiter(feedback_per_minute())  # ratings per key

    def add_to(self, router: APIRouter) -> None:
        """Add the route to ``router``."""
        router.add_api_route("/v1/feedback", self._feedback, methods=["POST"])

    async def _feedback(self, request: Request):
        """``POST /v1/feedback``: ``{"id": <a chat completion's id>, "rating": "up"|"down",
        "correction": <a better answer, optional>, "intent": <a label, optional>}``; answers the
        stored row's id."""
        try:
            caller = self.server.check_key(request)
            # one vote per answer and rater: the key's name; a keyless server (localhost only)
            # has one rater, whatever bearer a request makes up
            rater = caller.name or KEYLESS_RATER
            check_feedback_rate(self.server.feedback_limit, rater)
            answer_id, rating, correction, intent = parse_feedback(await read_json(request))
            # the common templates' spellings were refused above; the served model's own too,
            # as a chat message's are (serve.openai_api)
            session = getattr(self.server.engines, "session", None)
            texts = [("correction", correction), ("intent", intent)]
            at = first_control(getattr(session, "tokenizer", None), texts)
            if at is not None:
                raise RequestError(control_sentence(at), at)
            try:
                row = await run_in_threadpool(
                    self._rate, answer_id, rating, correction, intent, caller
                )
            except KeyError:  # never served, or served to another key: the same answer
                raise ApiError(
                    404,
                    f"no answer with id {answer_id[:80]!r} was served here to this key: every "
                    "whole answer is kept (logged or not), but not one cut off before its end "
                    "(a hang-up, an error), nor one a server with another store gave; an "
                    "answer is rated with the key that asked for it",
                    "invalid_request_error",
                    "unknown_answer",
                    "id",
                ) from None
        except RequestError as err:
            return ApiError(400, str(err), "invalid_request_error", param=err.param).response()
        except ApiError as err:
            return err.response()
        return {
            "object": "feedback",
            "id": row["id"],
            "answer_id": answer_id,
            "rating": rating,
            "model": row["adapter"],
            "version": row["version"],
            "correction": row["correction"] is not None,
            "intent": row["intent"],
            "conversation_logged": row["messages"] is not None,
        }

    def _rate(
        self,
        answer_id: str,
        rating: str,
        correction: str | None,
        intent: str | None,
        caller: Caller,
    ) -> dict:
        """Store ``caller``'s rating (replacing their earlier one of the same answer), then let
        the automatic rollback look (a thumbs-down may tip a canary).

        Raises:
            KeyError: no such answer, or one a chat key other than ``caller`` asked for.
        """
        served = self.server.feedback.answer(answer_id)
        if served is None or not may_rate(caller, served):
            raise KeyError(answer_id)
        rater = caller.name or KEYLESS_RATER
        row = self.server.feedback.rate(answer_id, rating, correction, "api", intent, rater=rater)
        self.server.auto_rollback.maybe_check()
        return row
