"""How far batching can go on this machine, from the model's linear layers alone.

A decode step of one row reads every weight once; a step of 16 rows reads them once too but
does 16 times the arithmetic. Whether 16 streams can reach 8x one stream's tokens/s therefore
depends on how the machine's matmuls scale from 1 row to 16, which differs between machines
of our kind (with or without native bf16, memory bandwidth). This times the session's own
linear layers (every projection and the output layer, through the kernels the session runs:
oneDNN's prepacked matmul where ``packed_linears.py`` applies) at 1 and 16 rows, and for the
prompt tokens 16 clients bring, and derives bounds on the goals of issue 23. Attention, LoRA
updates, sampling and Python only add to every step, so each bound is optimistic: a goal out
of the bound's reach is out of this machine's reach for this engine.
"""

from __future__ import annotations

import time


def _linears(model) -> tuple[list, object]:
    """The model's base linear layers (LoRA matrices left out) and its output layer."""
    import torch

    head = model.get_output_embeddings()
    layers = [
        m
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and m is not head and "lora_" not in name
    ]
    return layers, head


def linear_seconds(model, rows: int, head_rows: int | None = None, repeats: int = 3) -> float:
    """Best-of-``repeats`` seconds to run every projection of ``model`` once on ``rows`` rows and
    its output layer on ``head_rows`` rows (default ``rows``), as the session runs them."""
    import torch

    layers, head = _linears(model)
    weight = head.weight
    inputs = {
        m.in_features: torch.randn(rows, m.in_features, dtype=weight.dtype, device=weight.device)
        for m in layers
    }
    head_in = torch.randn(
        rows if head_rows is None else head_rows,
        head.in_features,
        dtype=weight.dtype,
        device=weight.device,
    )
    best = float("inf")
    with torch.inference_mode():
        for i in range(repeats + 1):  # pass 0 warms up
            start = time.perf_counter()
            for layer in layers:
                layer(inputs[layer.in_features])
            head(head_in)
            if weight.device.type == "cuda":
                torch.cuda.synchronize(weight.device)
            if i:
                best = min(best, time.perf_counter() - start)
    return best


def unshared_tokens(prompts: list[list[int]]) -> list[int]:
    """Each prompt's tokens after the beginning all prompts share (what a prefix cache that
    already holds that beginning still has to compute)."""
    shared = 0
    if prompts:
        first = prompts[0]
        while shared < min(len(p) for p in prompts) and all(
            p[shared] == first[shared] for p in prompts
        ):
            shared += 1
    return [len(p) - shared for p in prompts]


def prompt_ids(session, conversations: list[list[dict]], settings) -> list[list[int]]:
    """Token ids of each conversation's prompt, as the scheduler renders it."""
    from inference.generate import encode, with_system

    return [
        encode(session, [with_system(c, settings)])["input_ids"][0].tolist() for c in conversations
    ]


def batching_bounds(model, prompts: list[list[int]], tokens: int) -> dict:
    """Upper bounds for ``len(prompts)`` clients arriving at once, ``tokens`` tokens each.

    Returns:
        A dict: ``step_1_s``/``step_n_s`` (linears of one decode step, 1 and n rows),
        ``prefill_n_s`` (the n prompts' unshared tokens, last-token logits), ``prefill_1_s``
        (one prompt), ``speedup_max`` (n streams' aggregate over one stream's at best),
        ``ttft_min_s`` (first token of the last of the n, at best), ``full_ratio_min`` (the
        n-client full answer over a solo one, at best).
    """
    n = len(prompts)
    rest = unshared_tokens(prompts)
    step_1, step_n = linear_seconds(model, 1), linear_seconds(model, n)
    prefill_n = linear_seconds(model, sum(rest), head_rows=n)
    prefill_1 = linear_seconds(model, max(1, round(sum(rest) / n)), head_rows=1)
    solo = prefill_1 + tokens * step_1
    together = prefill_n + tokens * step_n
    return {
        "clients": n,
        "tokens": tokens,
        "prompt_tokens": sum(rest),
        "step_1_s": step_1,
        "step_n_s": step_n,
        "prefill_1_s": prefill_1,
        "prefill_n_s": prefill_n,
        "speedup_max": n * tokens / together / (tokens / solo),
        "ttft_min_s": prefill_n,
        "full_ratio_min": together / solo,
    }


def render_bounds(bounds: dict) -> list[str]:
    """Markdown lines: the bounds against the goals (8x, TTFT 1 s, full answer 2x)."""
    n, b = bounds["clients"], bounds
    ok = lambda good: "within reach" if good else "**out of reach**"  # noqa: E731
    return [
        "Bounds from the linear layers alone (attention, LoRA, sampling and Python only add): "
        f"one decode step's linears take {b['step_1_s'] * 1000:.1f} ms for 1 row and "
        f"{b['step_n_s'] * 1000:.1f} ms for {n} rows; the {n} prompts' {b['prompt_tokens']} "
        f"unshared tokens take {b['prefill_n_s'] * 1000:.0f} ms.",
        "",
        f"- aggregate at {n} clients: at most {b['speedup_max']:.2f}x one stream "
        f"(goal 8x: {ok(b['speedup_max'] >= 8)})",
        f"- first token of the last client: at least {b['ttft_min_s']:.2f} s "
        f"(goal 1 s: {ok(b['ttft_min_s'] <= 1)})",
        f"- full answer at {n} clients: at least {b['full_ratio_min']:.2f}x a solo answer "
        f"(goal 2x: {ok(b['full_ratio_min'] <= 2)})",
    ]
