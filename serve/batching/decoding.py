"""Per-request token choice and text streaming for rows of a shared batch.

Each request keeps its own sampling state: its logits processors (the same transformers
warpers ``generate`` uses, in the same order) and its own ``torch.Generator`` seeded from the
request's seed, so a sampled answer depends only on the request, never on its neighbours in
the batch or on when it joined.
"""

from __future__ import annotations

import torch

from core.thinking import visible_answer
from inference.generate import GenerationSettings


class TokenChooser:
    """Picks one request's next token from its row of logits."""

    def __init__(self, settings: GenerationSettings, stop_ids: list[int], prompt_ids: list[int]):
        from transformers import (
            LogitsProcessorList,
            RepetitionPenaltyLogitsProcessor,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        self.settings, self.stop_ids = settings, torch.tensor(stop_ids, dtype=torch.long)
        self.ids = torch.tensor([prompt_ids], dtype=torch.long)  # (1, prompt + generated)
        self.generated = 0
        processors = LogitsProcessorList()
        if settings.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(settings.repetition_penalty))
        self.generator = None
        if not settings.greedy:  # generate's warper order: temperature, top-k, top-p
            processors.append(TemperatureLogitsWarper(settings.temperature))
            if settings.top_k:
                processors.append(TopKLogitsWarper(settings.top_k))
            if settings.top_p < 1.0:
                processors.append(TopPLogitsWarper(settings.top_p))
            self.generator = torch.Generator().manual_seed(settings.seed)
        self.processors = processors

    @property
    def plain_greedy(self) -> bool:
        """True when the batch-wide argmax is this row's choice (no processor to apply)."""
        return self.generator is None and not self.processors and not self._holding_stop

    @property
    def _holding_stop(self) -> bool:
        return self.generated < self.settings.min_new_tokens

    def choose(self, logits: torch.Tensor, argmax: int) -> int:
        """The next token for this row; ``logits`` is its (vocab,) row, ``argmax`` its argmax."""
        if self.plain_greedy:
            token = argmax
        else:
            scores = logits.float().view(1, -1).clone()
            if self._holding_stop:  # as generate's min_new_tokens: end-of-turn is impossible
                scores[0, self.stop_ids] = -float("inf")
            scores = self.processors(self.ids, scores)
            if self.generator is None:
                token = int(scores.argmax(dim=-1))
            else:
                probs = torch.softmax(scores, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=self.generator))
        self.generated += 1
        if self.processors:  # only the repetition penalty reads the history
            self.ids = torch.cat([self.ids, torch.tensor([[token]])], dim=1)
        return token


class TextStream:
    """Turns a growing list of answer tokens into text deltas, cutting at stop strings.

    The whole answer is decoded again at each token (a byte-level token may complete a
    character begun by the previous one), and text that could still become a stop string,
    or an unfinished character, is held back until it is decided.
    """

    def __init__(self, tokenizer, stops: list[str] | None = None):
        self.tokenizer, self.stops = tokenizer, [s for s in (stops or []) if s]
        self.ids: list[int] = []
        self.text, self.sent = "", 0  # the answer so far; how much of it was handed out

    def push(self, token: int) -> tuple[str, bool]:
        """Add a token; returns (new text safe to show, True when a stop string was hit)."""
        self.ids.append(token)
        # A reasoning block (Qwen3's <think>) is no part of the answer, nor a place for stops.
        self.text = visible_answer(
            self.tokenizer.decode(self.ids, skip_special_tokens=True), final=False
        )
        found = [at for at in (self.text.find(s) for s in self.stops) if at >= 0]
        if found:  # the earliest stop string ends the answer; it is not part of the text
            self.text = self.text[: min(found)]
            return self._flush(len(self.text)), True
        end = len(self.text) - self.text.endswith("\ufffd")  # half a character: wait for it
        safe = end
        for stop in self.stops:  # the longest tail that begins a stop string waits
            for size in range(min(len(stop) - 1, end), 0, -1):
                if self.text[end - size : end] == stop[:size]:
                    safe = min(safe, end - size)
                    break
        return self._flush(safe), False

    def finish(self) -> str:
        """The held-back rest once the answer ended without a stop string."""
        self.text = visible_answer(self.tokenizer.decode(self.ids, skip_special_tokens=True))
        return self._flush(len(self.text))

    def _flush(self, upto: int) -> str:
        upto = max(upto, self.sent)
        delta, self.sent = self.text[self.sent : upto], upto
        return delta


def accept_token(request, token: int, stop_ids: set[int]) -> None:
    """Hand ``token``, the next token of ``request`` (its ticket, text stream, settings), to
    its reader: the end of the answer at an end-of-turn id, a stop string or the length cap."""
    ticket, stream = request.ticket, request.stream
    if token in stop_ids:
        ticket.put_text(stream.finish())
        ticket.finish("stop")
        return
    request.last = token
    ticket.completion_tokens += 1
    delta, hit = stream.push(token)
    ticket.put_text(delta)
    if hit:
        ticket.finish("stop")
    elif ticket.completion_tokens >= request.settings.max_new_tokens:
        ticket.put_text(stream.finish())
        ticket.finish("length")
