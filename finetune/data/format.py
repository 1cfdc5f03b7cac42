"""Turning one (prompt, response) row into ``input_ids`` and ``labels`` for causal-LM training.

The conversation is rendered with the tokenizer's own chat template, so training sees exactly
the text that chat and generation will see. Labels cover only the assistant's reply plus the
end-of-turn token (``<|im_end|>`` for ChatML): the model is taught to answer and to stop, and
never to reproduce the prompt. Everything else is ``IGNORE_INDEX``.

Models without a chat template (GPT-2, base checkpoints) get :data:`FALLBACK_TEMPLATE`::

    {system}\\n\\n                      (only when there is a system prompt)
    ### Instruction:\\n{prompt}\\n\\n
    ### Response:\\n{response}<eos>

where ``<eos>`` is the tokenizer's end-of-sequence token and plays the end-of-turn role.
"""

from __future__ import annotations

import json

from core.templates import (
    END_OF_TURN_TOKENS,
    TEMPLATE_OPTIONS,
    control_strings,
    encode_chats,
    render_prompt,
)
from finetune.data.labels import IGNORE_INDEX, fit  # noqa: F401  (re-exported)

FALLBACK_TEMPLATE = "{system}\n\n### Instruction:\n{prompt}\n\n### Response:\n{response}<eos>"
# Per-row outcome of encoding; the KEPT ones keep the row.
# "oldest_turns_dropped": a conversation that fits once its first exchanges are cut (kept).
STATUSES = (
    "ok",
    "truncated",
    "oldest_turns_dropped",
    "too_long",
    "prompt_too_long",
    "template_error",
)
KEPT = ("ok", "truncated", "oldest_turns_dropped")


class ChatFormat:
    """Renders and tokenizes conversations for one tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer; its ``chat_template`` is used when it has one.
        system_prompt: optional system message put first unless a row brings its own.

    Raises:
        ValueError: the tokenizer has no end-of-sequence token (the model could not learn
            to stop), or its chat template fails on a plain question (with the system prompt).
    """

    def __init__(self, tokenizer, system_prompt: str | None = None):
        if tokenizer.eos_token_id is None:
            raise ValueError(
                "the tokenizer has no end-of-sequence token; set tokenizer.eos_token "
                "so the model can learn where an answer ends"
            )
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt or None
        self.has_template = bool(getattr(tokenizer, "chat_template", None))
        self.end_of_turn_id = tokenizer.eos_token_id
        if self.has_template:
            try:
                self.end_of_turn_id = self._probe_end_of_turn()
            except Exception as err:  # e.g. a template that refuses a system message
                raise ValueError(
                    f"the model's chat template cannot render a one-question conversation"
                    f"{' with this system prompt' if self.system_prompt else ''}: {err}"
                ) from None

    @property
    def template_text(self) -> str:
        """The template that shapes the tokens (part of the dataset fingerprint)."""
        if not self.has_template:
            return "fallback:" + FALLBACK_TEMPLATE
        t = self.tokenizer.chat_template
        return t if isinstance(t, str) else json.dumps(t, sort_keys=True)

    @property
    def end_of_turn(self) -> str:
        return self.tokenizer.convert_ids_to_tokens(self.end_of_turn_id)

    def messages(self, prompt: str, history: str = "", system: str | None = None) -> list[dict]:
        """Conversation up to the user's prompt: system?, earlier turns (JSON list), user.

        ``system``, when given, is the whole first system message (a grounded row's: the
        system prompt and its passages, as ``finetune.data.passages`` built it).
        """
        earlier = json.loads(history) if history else []
        msgs = []
        if self.system_prompt and not any(m["role"] == "system" for m in earlier):
            msgs.append({"role": "system", "content": self.system_prompt})
        msgs = msgs + earlier + [{"role": "user", "content": prompt}]
        if system:
            if msgs[0]["role"] == "system":
                return [{**msgs[0], "content": system}, *msgs[1:]]
            return [{"role": "system", "content": system}, *msgs]
        return msgs

    def prompt_text(self, prompt: str, history: str = "") -> str:
        """The text a model continues to answer ``prompt``.

        Rendered by ``core.templates.render_prompt``, the function chat and evaluation
        use, so a tuned model is prompted exactly as it was trained.
        """
        return render_prompt(self.tokenizer, self.messages(prompt, history))

    def encode_batch(
        self, rows: dict, max_length: int, truncation: str, last_turn_only: bool = False
    ) -> dict:
        """Tokenize a batch of normalized rows (``prompt``, ``response``, ``history`` lists).

        Message text is tokenized as text by :func:`core.templates.encode_chat`: a row
        holding ``<|im_end|>`` teaches those characters, never an early end of turn.

        Returns:
            Lists ``input_ids``, ``labels``, ``length`` and ``status`` (one of
            :data:`STATUSES`); dropped rows have empty ``input_ids``.
        """
        systems = rows.get("system") or [None] * len(rows["prompt"])
        cols = (rows["prompt"], rows["response"], rows["history"], systems)
        # Rows with earlier turns: every assistant turn labelled (finetune.data.conversations);
        # None there (turns not separable, e.g. no template) falls back to the last turn alone.
        multi = {
            i: self._encode_conversation(p, r, h, max_length, truncation, last_turn_only, s)
            for i, (p, r, h, s) in enumerate(zip(*cols, strict=True))
            if h
        }
        multi = {i: enc for i, enc in multi.items() if enc is not None}
        convs = [
            None if i in multi else self._conversation(*row)
            for i, row in enumerate(zip(*cols, strict=True))
        ]
        encoded = self._encode_rows(convs)
        out = {"input_ids": [], "labels": [], "length": [], "status": []}
        for i, pair in enumerate(encoded):
            if i in multi:
                ids, labels, status = multi[i].input_ids, multi[i].labels, multi[i].status
            elif pair is None:
                ids, labels, status = [], [], "template_error"
            else:
                ids, labels, status = fit(*pair, self.end_of_turn_id, max_length, truncation)
            out["input_ids"].append(ids)
            out["labels"].append(labels)
            out["length"].append(len(ids))
            out["status"].append(status)
        return out

    def count_control_rows(self, rows: dict) -> int:
        """Rows whose prompt, response or history holds a control-token string (kept as text)."""
        cols = (rows["prompt"], rows["response"], rows["history"])
        return sum(
            1
            for texts in zip(*cols, strict=True)
            if any(control_strings(self.tokenizer, t or "") for t in texts)
        )

    def _encode_conversation(
        self, prompt, response, history, max_length, truncation, last_only, system=None
    ):
        """A multi-turn row as one example, or None to encode its last turn the single-turn way."""
        from finetune.data.conversations import encode

        try:
            msgs = self.messages(prompt, history, system)
        except (ValueError, TypeError, KeyError):
            return None
        msgs = msgs + [{"role": "assistant", "content": response}]
        return encode(self, msgs, max_length, truncation, last_only)

    def _conversation(
        self, prompt: str, response: str, history: str, system: str | None = None
    ) -> tuple | None:
        """(prompt messages, whole conversation, response), or None for unreadable history."""
        try:
            msgs = self.messages(prompt, history, system)
        except (ValueError, TypeError, KeyError):
            return None
        return msgs, msgs + [{"role": "assistant", "content": response}], response

    def _encode_rows(self, convs: list[tuple | None]) -> list[tuple | None]:
        """(prompt ids, reply ids) per row; None where the template rejects the row.

        Templates raise on shapes they do not accept (Mistral: roles must alternate); such a
        row is dropped and counted rather than ending the whole run. The batch is encoded in
        one go, and row by row only when some row fails.
        """
        good = [i for i, c in enumerate(convs) if c is not None]
        out: list[tuple | None] = [None] * len(convs)
        try:
            pairs = self._tokenize([convs[i] for i in good])
        except Exception:  # jinja2 TemplateError, ValueError from encode_chat
            pairs = []
            for i in list(good):
                try:
                    pairs += self._tokenize([convs[i]])
                except Exception:
                    good.remove(i)
        for i, pair in zip(good, pairs, strict=True):
            out[i] = pair
        return out

    def _tokenize(self, convs: list[tuple]) -> list[tuple]:
        """(prompt ids, reply ids) per conversation."""
        if not convs:
            return []
        tok = self.tokenizer
        p_ids = encode_chats(tok, [c[0] for c in convs], add_generation_prompt=True)
        if self.has_template:
            f_ids = encode_chats(tok, [c[1] for c in convs], add_generation_prompt=False)
            replies = [self._reply_span(p, f) for p, f in zip(p_ids, f_ids, strict=True)]
        else:
            replies = [None] * len(convs)
        missing = [i for i, r in enumerate(replies) if r is None]
        if missing:
            # Prompt not a token prefix of the conversation (merges across the boundary, or a
            # template that rewrites earlier turns): tokenize the reply alone and concatenate.
            alone = tok(
                [convs[i][2] for i in missing], add_special_tokens=False, split_special_tokens=True
            )["input_ids"]
            for i, ids in zip(missing, alone, strict=True):
                replies[i] = ids
        return list(zip(p_ids, replies, strict=True))

    def _reply_span(self, p_ids: list[int], f_ids: list[int]) -> list[int] | None:
        """Reply tokens between the prompt and the last end-of-turn token, or None."""
        n = len(p_ids)
        if f_ids[:n] != p_ids:
            return None
        tail = f_ids[n:]
        # The last one: a reply that itself contains "<|im_end|>" text must not end the span early.
        for j in range(len(tail) - 1, -1, -1):
            if tail[j] == self.end_of_turn_id:
                return tail[:j]
        return None

    def _probe_end_of_turn(self) -> int:
        """The special token the template closes an assistant turn with (ChatML: <|im_end|>)."""
        tok = self.tokenizer
        msgs = self.messages("hi")
        prompt = tok.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **TEMPLATE_OPTIONS
        )
        full = tok.apply_chat_template(
            msgs + [{"role": "assistant", "content": "ok"}], tokenize=False, **TEMPLATE_OPTIONS
        )
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        f_ids = tok(full, add_special_tokens=False)["input_ids"]
        special = set(tok.all_special_ids) | {
            i for i, t in getattr(tok, "added_tokens_decoder", {}).items() if t.special
        }
        tail = f_ids[len(p_ids) :] if f_ids[: len(p_ids)] == p_ids else f_ids
        found = [t for t in tail if t in special]
        # Phi-3 closes the turn with <|end|> and a finished conversation with eos after it:
        # the turn's own marker is the end, what follows is not the answer's.
        marked = [t for t in found if tok.convert_ids_to_tokens(t) in END_OF_TURN_TOKENS]
        # A template that closes turns with plain text still needs a stop token: use eos.
        return marked[0] if marked else found[-1] if found else tok.eos_token_id
