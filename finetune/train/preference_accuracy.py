"""The preference measure: how often an adapter finds a pair's chosen answer likelier than its
rejected one, and what that did to the chosen answers' perplexity. ``finetune train --method``
runs train; ``python -m bench preference`` and the tests score them with this."""

from __future__ import annotations


def preference_accuracy(
    model, tokenizer, pairs: list[dict], batch_size: int = 8
) -> tuple[float, float, float]:
    """(share of pairs whose chosen answer the model finds likelier than the rejected one,
    mean log-probability margin chosen - rejected, perplexity of the chosen answers): the
    answer's tokens and its end-of-turn token after the rendered prompt, summed. The perplexity
    says whether the margin was won by lowering both answers (likelihood displacement)."""
    import math

    import torch

    from core.templates import end_of_turn_ids, render_prompt

    end = end_of_turn_ids(tokenizer)[:1]
    sequences = []
    for pair in pairs:
        prompt = tokenizer(
            render_prompt(tokenizer, pair["prompt"]), add_special_tokens=False
        ).input_ids
        for answer in (pair["chosen"], pair["rejected"]):
            sequences.append((prompt, tokenizer(answer, add_special_tokens=False).input_ids + end))
    model.eval()
    scores: list[float] = []
    with torch.no_grad():
        for start in range(0, len(sequences), batch_size * 2):
            scores += _answer_logps(model, tokenizer, sequences[start : start + batch_size * 2])
    margins = [scores[i] - scores[i + 1] for i in range(0, len(scores), 2)]
    chosen_tokens = sum(len(sequences[i][1]) for i in range(0, len(sequences), 2))
    perplexity = math.exp(-sum(scores[0::2]) / max(chosen_tokens, 1))
    return sum(m > 0 for m in margins) / len(margins), sum(margins) / len(margins), perplexity


def _answer_logps(model, tokenizer, sequences: list[tuple[list[int], list[int]]]) -> list[float]:
    """Summed log-probabilities of each answer after its prompt (one padded forward)."""
    import torch

    width = max(len(p) + len(a) for p, a in sequences)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([p + a + [pad] * (width - len(p) - len(a)) for p, a in sequences])
    mask = torch.tensor(
        [[1] * (len(p) + len(a)) + [0] * (width - len(p) - len(a)) for p, a in sequences]
    )
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    logps = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return [
        float(logps[row, len(p) - 1 : len(p) + len(a) - 1].sum())
        for row, (p, a) in enumerate(sequences)
    ]
