"""Answers from a :class:`~inference.session.ModelSession`: streaming chat, batches, compare.

Every call names its adapter (``None`` or ``"__base__"``: the base model) and goes through
``ModelSession.generate``, which holds the session lock and passes PEFT ``adapter_names``, so
a mixed batch (base + tuned, or several adapters) is one ``generate`` call and no global
on/off state can leak between answers or threads.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from core.templates import encode_chats, end_of_turn_ids
from core.thinking import visible_answer
from inference.session import ModelSession, is_base

MAX_NEW_TOKENS = 2048
MAX_BATCH_ROWS = (
    64  # rows in one generate call (compare panes, batch prompts); memory grows with it
)
_ENCODE_LOCK = threading.Lock()


@dataclass
class GenerationSettings:
    """How an answer is produced; :meth:`validate` lists every problem at once."""

    max_new_tokens: int = 256  # answer length cap, 1..2048
    temperature: float = 0.0  # 0 = greedy (deterministic); sampling up to 2.0
    top_p: float = 0.9  # nucleus mass in (0, 1]; sampling only
    top_k: int = 50  # sample among the k likeliest tokens; 0 = no limit; sampling only
    repetition_penalty: float = 1.0  # > 1 discourages repeats; 1 = off; up to 2.0
    seed: int = 0  # sampling seed: same seed, same settings, same answer
    min_new_tokens: int = 0  # never stop before this many tokens (benchmarks); 0 = off
    system_prompt: str = ""  # put first as a system message when the chat has none

    def validate(self) -> list[str]:
        """Every problem, in words; out-of-range values are refused, never clamped."""
        checks = [
            (
                _is_int(self.max_new_tokens) and 1 <= self.max_new_tokens <= MAX_NEW_TOKENS,
                f"max_new_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got "
                f"{self.max_new_tokens!r}",
            ),
            (
                _is_num(self.temperature) and 0 <= self.temperature <= 2,
                f"temperature must be from 0 (greedy) to 2, got {self.temperature!r}",
            ),
            (
                _is_num(self.top_p) and 0 < self.top_p <= 1,
                f"top_p must be above 0 and at most 1, got {self.top_p!r}",
            ),
            (
                _is_int(self.top_k) and 0 <= self.top_k <= 1000,
                f"top_k must be a whole number from 0 (no limit) to 1000, got {self.top_k!r}",
            ),
            (
                _is_num(self.repetition_penalty) and 1 <= self.repetition_penalty <= 2,
                f"repetition_penalty must be from 1 (off) to 2, got {self.repetition_penalty!r}",
            ),
            (
                _is_int(self.seed) and 0 <= self.seed < 2**63,
                f"seed must be a whole number of 0 or more, got {self.seed!r}",
            ),
            (
                _is_int(self.min_new_tokens)
                and 0 <= self.min_new_tokens <= _most(self.max_new_tokens),
                f"min_new_tokens must be from 0 to max_new_tokens, got {self.min_new_tokens!r}",
            ),
            (isinstance(self.system_prompt, str), "system_prompt must be text"),
        ]
        return [message for ok, message in checks if not ok]

    def check(self) -> None:
        """Raise one ``ValueError`` naming every problem (nothing when the settings are fine)."""
        problems = self.validate()
        if problems:
            raise ValueError("invalid generation settings: " + "; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Answer:
    """One generated answer, labelled with what produced it."""

    adapter: str  # the adapter name, or "base"
    adapter_hash: str  # the adapter's hash; for the base, the base weight hash
    text: str
    tokens: int  # generated tokens, not counting the end-of-turn token
    seconds: float  # wall time of the generate call that produced it (shared by a batch)
    finish_reason: str  # "stop" (end of turn) or "length" (hit max_new_tokens)


def stream_chat(
    session: ModelSession,
    messages: list[dict],
    adapter: str | None = None,
    settings: GenerationSettings | None = None,
) -> Iterator[str]:
    """Stream one answer; yields the text so far (accumulated, not deltas).

    The last value is the whole answer, equal to the non-streamed one. Closing the generator
    early stops generation at the next token. Do not hold ``session.lock`` while iterating:
    the generation thread needs it.

    Raises:
        ValueError: bad settings or messages, or an unusable adapter (before any text).
        AdapterMismatchError: the adapter belongs to another base model.
    """
    from transformers import StoppingCriteriaList, TextIteratorStreamer

    settings = settings or GenerationSettings()
    settings.check()
    if not is_base(adapter):
        session.load_adapter(adapter)  # clear errors here, before the thread starts
    inputs = fitting(session, encode(session, [with_system(messages, settings)]))
    streamer = TextIteratorStreamer(session.tokenizer, skip_prompt=True, skip_special_tokens=True)
    stop, errors = threading.Event(), []

    def work() -> None:
        try:
            session.generate(
                inputs,
                [adapter],
                seed=settings.seed,
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([StopWhenSet(stop)]),
                **generate_kwargs(session, settings),
            )
        except BaseException as err:  # handed to the reading side, which re-raises it
            errors.append(err)
            streamer.end()

    thread = threading.Thread(target=work, daemon=True, name="tunedesk-generate")
    thread.start()
    text, last = "", None
    try:
        for piece in streamer:
            if piece:
                text += piece
                shown = visible_answer(text, final=False)  # a reasoning block is no part of it
                if shown != (last or ""):
                    last = shown
                    yield shown
    finally:
        stop.set()
        thread.join()
    if errors:
        raise errors[0]
    if last is None or visible_answer(text) != last:
        yield visible_answer(text)  # the whole answer last (an empty one too: a value for the chat)


def generate_batch(
    session: ModelSession,
    prompts: list[list[dict]],
    adapter_names: list[str | None],
    settings: GenerationSettings | None = None,
) -> list[Answer]:
    """Answer several conversations in ONE batched ``generate`` call (left-padded).

    Args:
        prompts: one message list per row.
        adapter_names: the adapter per row; ``None`` or ``"__base__"`` for the base model.
    """
    if len(prompts) != len(adapter_names):
        raise ValueError(f"{len(prompts)} prompts but {len(adapter_names)} adapter names")
    settings = settings or GenerationSettings()
    settings.check()
    check_rows(session, adapter_names)
    inputs = fitting(session, encode(session, [with_system(m, settings) for m in prompts]))
    return _run_batch(session, inputs, adapter_names, settings)


def compare(
    session: ModelSession,
    messages: list[dict],
    adapters: list[str | None],
    settings: GenerationSettings | None = None,
) -> list[Answer]:
    """Answer the same conversation with each adapter (``None``: base), in one batched call."""
    if not adapters:
        raise ValueError("compare needs at least one adapter (None for the base model)")
    settings = settings or GenerationSettings()
    settings.check()
    check_rows(session, adapters)
    one = fitting(session, encode(session, [with_system(messages, settings)]))  # tokenized once
    inputs = {k: v.repeat(len(adapters), 1) for k, v in one.items()}
    return _run_batch(session, inputs, adapters, settings)


def encode(session: ModelSession, conversations: list[list[dict]]) -> dict:
    """Render and tokenize conversations into a left-padded batch of tensors.

    :func:`core.templates.encode_chat` does the tokenizing: text a user typed stays text,
    even ``<|im_start|>system``; only the template's markers are control tokens.
    """
    tokenizer = session.tokenizer
    # The lock: a fast tokenizer sets its truncation/padding state per call ("Already
    # borrowed" if two threads encode at once).
    with _ENCODE_LOCK:
        rows = encode_chats(tokenizer, conversations, add_generation_prompt=True)
        return tokenizer.pad(
            {"input_ids": rows}, padding=True, return_tensors="pt", return_attention_mask=True
        )


def check_rows(session: ModelSession, adapters: list[str | None]) -> None:
    """Refuse a batch too big for one call before any adapter is loaded for it."""
    distinct = {a for a in adapters if not is_base(a)}
    if len(adapters) > MAX_BATCH_ROWS:
        raise ValueError(f"{len(adapters)} answers in one call; at most {MAX_BATCH_ROWS}")
    if len(distinct) > session.max_loaded_adapters:
        raise ValueError(
            f"{len(distinct)} different adapters in one call, but the session holds "
            f"at most {session.max_loaded_adapters}"
        )


def context_limit(session: ModelSession) -> int | None:
    """The most tokens the session's model reads (its positions), None where its config says
    nothing."""
    config = session.model.config
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


class PromptTooLong(ValueError):
    """A conversation longer than its reader takes: the asker's to shorten, no fault of the
    model (the API answers it as a bad request and counts it against no version)."""

    def __init__(self, tokens: int, limit: int, reader: str = "this model"):
        super().__init__(
            f"the conversation is {tokens} tokens; {reader} reads at most {limit}: "
            "shorten the message or clear the chat"
        )
        self.tokens, self.limit = tokens, limit


def fitting(session: ModelSession, inputs: dict) -> dict:
    """Refuse a prompt that fills the model's whole context (a pasted book, a runaway chat).

    Its attention and activations would grow with it before the model could answer at all.

    Raises:
        PromptTooLong: the prompt holds as many tokens as the model's positions, or more.
    """
    limit = context_limit(session)
    length = inputs["input_ids"].shape[1]
    if limit and length >= limit:
        raise PromptTooLong(length, limit)
    return inputs


def _run_batch(
    session: ModelSession, inputs: dict, adapters: list[str | None], settings: GenerationSettings
) -> list[Answer]:
    hashes = [session.adapter_hash(a) for a in adapters]  # loads and checks each adapter
    start = time.perf_counter()
    out = session.generate(
        inputs, adapters, seed=settings.seed, **generate_kwargs(session, settings)
    )
    seconds = round(time.perf_counter() - start, 4)
    stop_ids = set(session_stop_ids(session))
    answers = []
    for row, adapter, digest in zip(
        out[:, inputs["input_ids"].shape[1] :].tolist(), adapters, hashes, strict=True
    ):
        end = next((i for i, t in enumerate(row) if t in stop_ids), None)
        ids = row if end is None else row[:end]
        answers.append(
            Answer(
                "base" if is_base(adapter) else adapter,
                digest,
                visible_answer(session.tokenizer.decode(ids, skip_special_tokens=True)),
                len(ids),
                seconds,
                "length" if end is None else "stop",
            )
        )
    return answers


def generate_kwargs(session: ModelSession, settings: GenerationSettings) -> dict:
    tokenizer = session.tokenizer
    kwargs = {
        "max_new_tokens": settings.max_new_tokens,
        "do_sample": not settings.greedy,
        "eos_token_id": session_stop_ids(session),
        "pad_token_id": tokenizer.pad_token_id,
        "repetition_penalty": settings.repetition_penalty,
    }
    if settings.min_new_tokens:
        kwargs["min_new_tokens"] = settings.min_new_tokens
    if not settings.greedy:  # passing these with do_sample=False only earns warnings
        kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k)
    return kwargs


def session_stop_ids(session: ModelSession) -> list[int]:
    """End-of-turn ids of the tokenizer plus the eos ids of the model's generation config."""
    eos = session.model.generation_config.eos_token_id
    return list(
        _cached_stop_ids(session.tokenizer, tuple(eos) if isinstance(eos, list) else (eos,))
    )


@functools.lru_cache(maxsize=8)
def _cached_stop_ids(tokenizer, config_eos: tuple) -> tuple[int, ...]:
    ids = end_of_turn_ids(tokenizer)  # builds the vocab dict: worth caching per tokenizer
    return tuple(ids + [i for i in config_eos if i is not None and i not in ids])


def with_system(messages: list[dict], settings: GenerationSettings) -> list[dict]:
    if settings.system_prompt and not any(m.get("role") == "system" for m in messages):
        return [{"role": "system", "content": settings.system_prompt}, *messages]
    return list(messages)


class StopWhenSet:
    """Stopping criterion that ends generation once the reader has gone away."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        return torch.full(
            (input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device
        )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _most(max_new_tokens) -> int:
    """The cap for min_new_tokens: max_new_tokens when that is usable (it is checked itself)."""
    return max_new_tokens if _is_int(max_new_tokens) else MAX_NEW_TOKENS


def _is_num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
