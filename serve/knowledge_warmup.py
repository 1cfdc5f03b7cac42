"""Warm llama-server's prompt cache with a knowledge version, so grounded answers start fast.

A grounded answer's prompt begins with its system message: the instruction and the best passage
(:data:`knowledge.grounding.DEFAULT_K` is one). TuneDesk's llama-server keeps the prompts its
slots let go in host memory, per adapter (``core/llama_cpp/process.py``), and starts a request
from the saved prompt that begins like it: an answer grounded in a passage an earlier request of
the same model read computes only the customer's turn. Warming reads each passage once, as the
only one shown, with its own question (or title) as the customer's turn and one token of answer,
so the first customers get that too.

The passages customers are most likely to be shown are read first (how often each is the
routed top hit of the version's own questions: :func:`knowledge.routing.likely_first`), until
:data:`WARM_SHARE` of the server's cache (:func:`server_cache_mib`: its memory and, in TuneDesk's
build, its folder on disk, where the oldest states move once memory is full) is spent by the
model's keys and values (its f16 bytes per token times each prompt's tokens), or
``max_passages``. Each read waits until no answer is in flight (customers first) and goes to
llama-server only. The cache lives in that server process: a server started later (a new adapter
on the shelf, a restart) starts cold (:mod:`serve.warm_keeper` reads a kept warm-up again then).
The version's intent classifiers, which route its searches (:mod:`knowledge.routing`), are fitted
first, so the first customer's search does not wait for them either.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from core.limits import kv_bytes_per_token
from core.llama_cpp.prompt_cache import CACHE_ENV, cache_ram_mib
from inference.generate import GenerationSettings
from knowledge.answer_check import checker_for
from knowledge.grounding import shown_alone
from knowledge.passages import spells_control
from knowledge.routing import likely_first
from knowledge.store import LATEST, KnowledgeShelf

log = logging.getLogger(__name__)

WARM_SHARE = 0.75  # of the server's prompt cache: the rest keeps customers' own conversations
CACHE_BYTES_PER_VALUE = 2  # llama-server keeps keys and values as f16 (its default)
IDLE_WAIT = 0.005  # seconds between looks for a quiet moment (its own answer ends just before)


@dataclass
class WarmResult:
    """What one warm-up read."""

    model: str  # the adapter, or "base"
    knowledge: str
    version: str
    passages: int  # read into the cache
    total: int  # in the version
    refused: int  # passages that spell a control token: never shown, so not read
    prompt_tokens: int  # read, over all passages
    cache_mib: float  # their keys and values, as llama-server keeps them
    budget_mib: float
    seconds: float
    ended: str  # "all", "budget", "max_passages" or "stopped"

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        why = {
            "all": "every passage",
            "budget": f"the cache budget ({self.budget_mib:,.0f} MiB) was spent",
            "max_passages": "the asked number",
            "stopped": "the server is stopping",
        }[self.ended]
        return (
            f"warmed {self.model} with {self.passages:,} of {self.total:,} passages of "
            f"{self.knowledge} {self.version} ({why}): {self.prompt_tokens:,} prompt tokens, "
            f"{self.cache_mib:,.1f} MiB of cache, {self.seconds:.0f} s"
        )


def warm(
    engines,
    adapter: str | None,
    name: str,
    version: str = LATEST,
    *,
    max_passages: int | None = None,
    system_prompt: str = "",
    budget_mib: float | None = None,
    shelf: KnowledgeShelf | None = None,
) -> WarmResult:
    """Read the passages of knowledge ``name`` ``version`` into llama-server's prompt cache for
    ``adapter`` (None: the base model), one at a time, each when no answer is in flight.

    Args:
        engines: the serving engines (:class:`serve.engines.Engines`); llama.cpp must serve.
        system_prompt: the system prompt the grounded answers will have ("" as ``/v1`` has).
        budget_mib: cache to fill at most (default :data:`WARM_SHARE` of the server's).

    Raises:
        ValueError: llama.cpp does not serve here, its prompt cache is off, an unknown
            knowledge base or version, ``max_passages`` below 1.
    """
    if max_passages is not None and (type(max_passages) is not int or max_passages < 1):
        raise ValueError(f"max_passages must be a whole number of at least 1, not {max_passages!r}")
    if engines.llama() is None:
        raise ValueError(
            "warming needs llama-server, which does not serve here "
            f"({engines.llama_error or 'the engine is set to pytorch'})"
        )
    cache = server_cache_mib(engines.llama())
    if cache == 0:
        why = (
            f"is off ({CACHE_ENV}=0)"
            if cache_ram_mib() == 0
            else "is off (this llama-server is not TuneDesk's build and holds LoRA files)"
        )
        raise ValueError(
            f"llama-server's prompt cache {why}: a warm-up would keep nothing; set "
            f"{CACHE_ENV} to the MiB the cache may hold"
        )
    chosen = (shelf or KnowledgeShelf()).get(name, version or LATEST)
    checker_for(chosen)  # the routing's classifiers, fitted now rather than at the first answer
    tokenizer = engines.session.tokenizer
    per_token = kv_bytes_per_token(engines.session.model.config, CACHE_BYTES_PER_VALUE)
    budget = float(WARM_SHARE * cache if budget_mib is None else budget_mib)
    settings = GenerationSettings(max_new_tokens=1, system_prompt=system_prompt)
    done = refused = tokens = 0
    spent = 0.0
    ended = "all"
    start = time.perf_counter()
    for _, passage in likely_first(chosen):
        if max_passages is not None and done >= max_passages:
            ended = "max_passages"
            break
        if spells_control(passage, tokenizer):
            refused += 1  # never shown to the model, so never worth reading
            continue
        # the next one is about as long as those before: stop before the budget is passed
        if done and spent + spent / done > budget:
            ended = "budget"
            break
        asked = passage.question or passage.title
        messages = shown_alone([{"role": "user", "content": asked}], passage, system_prompt)
        if not _wait_quiet(engines):
            ended = "stopped"
            break
        ticket = engines.submit(messages, adapter, settings, pin="llama.cpp")
        ticket.text()
        spent += (ticket.prompt_tokens + 1) * per_token / 2**20
        tokens += ticket.prompt_tokens
        done += 1
    result = WarmResult(
        adapter or "base",
        chosen.name,
        chosen.version,
        done,
        chosen.passages,
        refused,
        tokens,
        round(spent, 3),
        budget,
        round(time.perf_counter() - start, 1),
        ended,
    )
    log.info(result.line())
    return result


def server_cache_mib(engine) -> int:
    """MiB the local llama-server's prompt cache may keep, in memory and on disk (where only
    remote servers answer: the memory this machine's setting gives one)."""
    local = next((u.process for u in engine.upstreams.all if u.process is not None), None)
    return local.cache_mib() if local is not None else cache_ram_mib()


def _wait_quiet(engines) -> bool:
    """Wait until no answer is in flight or waiting; False when the engines are stopping."""
    while engines.crowd():
        if engines.stopping.is_set():
            return False
        time.sleep(IDLE_WAIT)
    return not engines.stopping.is_set()
