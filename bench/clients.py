"""Many clients at once against one engine: aggregate tokens/s, time to first token and time
to the full answer, per client count (``python -m bench serving --clients 1,4,16``).

The driver only needs a submit callable, ``engine_submit(messages, adapter, settings)``
returning an iterable of text deltas, so the same function measures the scheduler directly
and, through a thin wrapper, an HTTP endpoint. Every client sends one request at the same
moment (the hardest case for time to first token) for its own adapter, round-robin over the
adapters and the base, and every answer is exactly ``tokens`` tokens long (``min_new_tokens``),
so runs compare like with like. Every request of a benchmark is a different question (its own
ticket number first), as customers' are: a server may reuse the chat template's shared
beginning (``prefix_cache.py``), never a whole earlier prompt.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable

from bench.ceiling import render_bounds
from inference.generate import GenerationSettings

QUESTIONS = [
    "Where is my order? I ordered a blue jacket last week.",
    "I want a refund for order 1234, the shoes do not fit.",
    "How do I change the shipping address of my order?",
    "Can I talk to a human agent about my invoice?",
    "What payment methods do you accept?",
    "Please cancel my order, I bought it by mistake.",
]

Submit = Callable[[list[dict], "str | None", GenerationSettings], Iterable[str]]
_TICKETS = itertools.count(1001)  # ticket numbers: unique within a benchmark process


def question(ticket: int, index: int, questions: list[str] | None = None) -> list[dict]:
    """Client ``index``'s chat, opened with its own ticket number (``questions``: the texts to
    take it from, default :data:`QUESTIONS`)."""
    texts = questions or QUESTIONS
    return [{"role": "user", "content": f"Ticket {ticket}: {texts[index % len(texts)]}"}]


def _one_client(
    submit: Submit,
    messages: list[dict],
    adapter,
    settings,
    start: threading.Barrier,
    out: list,
    index: int,
) -> None:
    start.wait()
    began, first, text = time.perf_counter(), None, []
    try:
        for delta in submit(messages, adapter, settings):
            if first is None and delta:
                first = time.perf_counter()
            text.append(delta)
        out[index] = (
            began,
            first or time.perf_counter(),
            time.perf_counter(),
            None,
            "".join(text),
            messages,
        )
    except Exception as err:  # reported in the row, the other clients go on
        out[index] = (began, began, time.perf_counter(), err, "", messages)


def run_clients(
    submit: Submit,
    clients: int,
    adapters: list,
    tokens: int,
    first_ticket: int | None = None,
    first_question: int = 0,
    questions: list[str] | None = None,
) -> dict:
    """``clients`` requests at once; their timings and the aggregate tokens/s. ``first_ticket``
    numbers the questions from there (the same questions for two servers), else afresh;
    client ``i`` asks question ``first_question + i`` of ``questions`` (default
    :data:`QUESTIONS`), in turn."""
    settings = GenerationSettings(max_new_tokens=tokens, min_new_tokens=tokens)
    out: list = [None] * clients
    start = threading.Barrier(clients)
    threads = [
        threading.Thread(
            target=_one_client,
            daemon=True,
            args=(
                submit,
                question(
                    next(_TICKETS) if first_ticket is None else first_ticket + i,
                    first_question + i,
                    questions,
                ),
                adapters[i % len(adapters)],
                settings,
                start,
                out,
                i,
            ),
        )
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [str(r[3]) for r in out if r[3] is not None]
    began = min(r[0] for r in out)
    ttft = [r[1] - r[0] for r in out]
    full = [r[2] - r[0] for r in out]
    wall = max(r[2] for r in out) - began
    return {
        "clients": clients,
        "tokens": tokens,
        "errors": errors,
        "texts": [r[4] for r in out],
        "messages": [r[5] for r in out],
        "aggregate_tps": clients * tokens / wall,
        "wall_s": wall,
        "ttfts": ttft,
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p95_s": _pct(ttft, 95),
        "full_p50_s": _pct(full, 50),
        "full_p95_s": _pct(full, 95),
    }


def bench_clients(
    engine_submit: Submit,
    clients: list[int],
    adapters: list,
    tokens: int = 64,
    log: Callable[[str], None] | None = None,
    check: int = 16,
) -> list[dict]:
    """One row per client count; ratios against the single client (measured first).

    Args:
        engine_submit: ``(messages, adapter, settings) -> iterable of text deltas``.
        clients: client counts to run, e.g. ``[1, 4, 16]`` (1 is added when missing).
        adapters: the adapters the clients use round-robin (``None``: the base).
        tokens: answer length of every request.
        check: answer this many requests of the largest count again alone (0: none), and
            compare the texts.
    """
    run_clients(engine_submit, len(adapters), adapters, 4)  # warm up: loads, merged weights
    counts = sorted(set(clients) | {1})
    rows = []
    for count in counts:
        row = run_clients(engine_submit, count, adapters, tokens)
        rows.append(row)
        if log:
            log(
                " ".join(
                    f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in row.items()
                    if k not in ("texts", "messages")
                )
            )
    solo = rows[0]
    if check:
        rows[-1].update(same_as_alone(engine_submit, rows[-1], adapters, tokens, check))
    for row in rows:
        row["speedup"] = row["aggregate_tps"] / solo["aggregate_tps"]
        row["full_p95_vs_solo"] = row["full_p95_s"] / solo["full_p50_s"]
    return rows


def same_as_alone(submit: Submit, row: dict, adapters: list, tokens: int, count: int) -> dict:
    """How many of ``row``'s answers equal the same request answered alone, and for those
    that differ, the first character where they part."""
    settings = GenerationSettings(max_new_tokens=tokens, min_new_tokens=tokens)
    partings = []
    for i, (batched, messages) in enumerate(
        zip(row["texts"][:count], row["messages"], strict=False)
    ):
        solo = "".join(submit(messages, adapters[i % len(adapters)], settings))
        if solo != batched:
            partings.append(
                next(
                    (k for k, (a, b) in enumerate(zip(solo, batched, strict=False)) if a != b),
                    min(len(solo), len(batched)),
                )
            )
    return {
        "checked": min(count, len(row["texts"])),
        "identical": min(count, len(row["texts"])) - len(partings),
        "partings": partings,
    }


def _pct(values: list[float], pct: int) -> float:
    """The ``pct`` percentile (nearest rank: with 16 values, p95 is the slowest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))]


def render_clients(results: dict[str, list[dict]], adapters: list) -> list[str]:
    """Markdown table lines: one row per (dtype, client count), with the goals checked."""
    names = ", ".join("base" if a is None else a for a in adapters)
    lines = [
        f"Clients send at once, round-robin over {names}; each answer exactly "
        f"{next(iter(results.values()))[0]['tokens']} tokens, greedy.",
        "",
        "| engine | clients | aggregate tok/s | x single | TTFT p50 / p95 | full answer "
        "p50 / p95 | p95 / solo | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dtype, rows in results.items():
        for r in rows:
            mark = _marker(r["clients"] >= 16)
            lines.append(
                f"| {dtype} | {r['clients']} | {r['aggregate_tps']:.1f} | "
                f"{r['speedup']:.2f}x{mark(r['speedup'] >= 8)} | "
                f"{r['ttft_p50_s'] * 1000:.0f} / {r['ttft_p95_s'] * 1000:.0f} ms"
                f"{mark(r['ttft_p95_s'] <= 1)} | {r['full_p50_s']:.2f} / {r['full_p95_s']:.2f} s | "
                f"{r['full_p95_vs_solo']:.2f}x{mark(r['full_p95_vs_solo'] <= 2)} | "
                f"{len(r['errors'])} |"
            )
    lines.append("")
    for dtype, rows in results.items():
        last = rows[-1]
        if "identical" in last:
            lines.append(
                f"- {dtype}, {last['clients']} clients: {last['identical']}/{last['checked']} "
                "checked answers identical to the same request answered alone"
                + (f"; the others part at character {last['partings']}" if last["partings"] else "")
            )
    single = {
        name: rows[0]["aggregate_tps"]
        for name, rows in results.items()
        if name.startswith("llama.cpp")
    }
    for base_name, base_tps in single.items():
        for name, rows in results.items():
            if name != base_name:
                top = rows[-1]
                lines.append(
                    f"- {name} at {top['clients']} clients: {top['aggregate_tps']:.1f} tok/s = "
                    f"{top['aggregate_tps'] / base_tps:.2f}x {base_name}'s single stream "
                    f"({base_tps:.1f} tok/s, same run)"
                )
    lines.append("")
    lines.append(
        "Goals at 16 clients: aggregate >= 8x single, TTFT p95 <= 1 s, "
        "full answer p95 <= 2x a solo answer."
    )
    for dtype, rows in results.items():
        if "bounds" in rows[-1]:
            first, *rest = render_bounds(rows[-1]["bounds"])
            lines += ["", f"{dtype}: {first}", *rest]
    return lines


def _marker(checked: bool):
    """A goal mark for rows the goals speak of (16 clients and more), nothing for others."""
    return lambda ok: (" ✅" if ok else " ❌") if checked else ""


def measure_scheduler(
    model_path,
    shelf,
    dtype: str,
    clients: list[int],
    adapters: list,
    tokens: int,
    log=None,
    check: int = 16,
) -> tuple[str, list[dict]]:
    """The scheduler of a fresh session in ``dtype``: (resolved dtype, rows)."""
    from inference.session import ModelSession
    from serve.batching.scheduler import Scheduler

    session = ModelSession(str(model_path), dtype=dtype, adapters_dir=shelf)
    session.load()
    with Scheduler(session) as scheduler:
        rows = bench_clients(scheduler.submit, clients, adapters, tokens, log=log, check=check)
    rows[-1]["bounds"] = bounds_for(session, max(clients), tokens)
    return session.dtype, rows


def session_bounds(model_path, dtype: str, clients: int, tokens: int) -> dict:
    """:func:`bounds_for` on a fresh session of ``model_path`` in ``dtype``."""
    from inference.session import ModelSession

    session = ModelSession(str(model_path), dtype=dtype)
    session.load()
    return bounds_for(session, clients, tokens)


def bounds_for(session, clients: int, tokens: int) -> dict:
    """``ceiling.batching_bounds`` for ``clients`` of this benchmark's questions."""
    from bench.ceiling import batching_bounds, prompt_ids

    settings = GenerationSettings(max_new_tokens=tokens)
    prompts = prompt_ids(session, [question(next(_TICKETS), i) for i in range(clients)], settings)
    return batching_bounds(session.model, prompts, tokens)


def clients_section(
    heading: str, setup: list[str], results: dict[str, list[dict]], adapters: list
) -> str:
    """The markdown section of a clients run: heading, setup lines, the table."""
    return "\n".join([heading, "", *setup, "", *render_clients(results, adapters)]) + "\n"
