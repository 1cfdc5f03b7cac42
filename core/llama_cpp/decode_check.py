"""How many threads llama-server decodes one request's tokens on (``-t``): measured once per
machine, remembered beside the binary.

Whether one thread decodes as fast as every core depends on the CPU, not on its core count
(memory-bound CPUs: about as fast; compute-bound ones: clearly slower; docs/benchmarks.md). One
thread is the safer choice where it costs little: beside a process that keeps a core busy at the
same priority, two threads wait on each other at every layer. So the first server the app starts
on a machine decodes a few tokens with ``-t 1`` and with ``-t <threads>``, each on a fresh
server without adapters, and later servers take one thread where it decoded at least
:data:`ONE_THREAD_SHARE` of all threads' speed, else all of them. Training runs are niced
(``TUNEDESK_TRAIN_NICE``, their sessions too), so all threads stay ahead of one beside a run.

Where the kernel groups processes by session for scheduling (``sched_autogroup_enabled``, as on
most Linux kernels), llama-server (a session of its own) shares the cores first with each other
session at the same group priority: the app's own PyTorch work (an evaluation, Compare), a run
started from a terminal, any other program. The app's training runs and its background llama.cpp
build lower their sessions' share (``finetune/train/priority.py``, the Makefile), but beside any
of the others two decoding threads stall, so on a machine of two cores one decoding thread is
kept there without measuring. ``TUNEDESK_LLAMA_DECODE_THREADS`` overrides both. A machine whose
cores are busy while it measures reads all threads as slower and takes one: the cautious side.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx

from core.llama_cpp.machine_facts import keep, recalled
from core.llama_cpp.process import (
    FEW_CORES,
    LlamaServerError,
    LlamaServerProcess,
    decode_threads_for,
    decode_threads_said,
)

log = logging.getLogger(__name__)

FACTS_FILE = ".decode-threads.json"
ONE_THREAD_SHARE = 0.9  # one thread is chosen where it decodes at least this share of all
PROBE_TOKENS = 32  # tokens a probe request decodes (the first request warms up, uncounted)


def decode_threads(binary: Path, model: Path, threads: int, log_file: Path) -> int:
    """The ``-t`` for llama-servers of ``threads`` threads on this machine: the operator's
    ``TUNEDESK_LLAMA_DECODE_THREADS``, else the remembered measurement, else one made now
    (``model``: the GGUF it decodes; ``log_file``: the probe servers' log). A probe that fails
    leaves :func:`~core.llama_cpp.process.decode_threads_for`'s choice, unremembered.

    Raises:
        ValueError: a malformed ``TUNEDESK_LLAMA_DECODE_THREADS``.
    """
    said = decode_threads_said()
    if said is not None:
        return said
    if threads <= 1:
        return 1
    if threads <= FEW_CORES and sessions_grouped():
        return decode_threads_for(threads)  # other sessions at our priority stall two threads
    entry = recalled(binary, FACTS_FILE)
    if entry and entry.get("threads") == threads and isinstance(entry.get("decode_threads"), int):
        return entry["decode_threads"]
    try:
        rates = {t: decode_rate(binary, model, threads, t, log_file) for t in (1, threads)}
    except (LlamaServerError, httpx.HTTPError, KeyError, ValueError) as error:
        log.warning("llama-server's decode threads were not measured (%s)", error)
        return decode_threads_for(threads)
    chosen = choose(rates, threads)
    keep(binary, FACTS_FILE, {"threads": threads, "decode_threads": chosen, "tok_s": rates})
    log.info("llama-server decodes on %d of %d threads here (tokens/s: %s)", chosen, threads, rates)
    return chosen


def sessions_grouped() -> bool:
    """Whether the kernel shares the CPU between sessions first (autogroup), so a process's
    niceness does not reach the app's llama-server (a session of its own)."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def choose(rates: dict[int, float], threads: int) -> int:
    """1 where one thread decoded at least :data:`ONE_THREAD_SHARE` of ``threads``' tokens/s."""
    return 1 if rates[1] >= ONE_THREAD_SHARE * rates[threads] else threads


def decode_rate(binary: Path, model: Path, threads: int, decode: int, log_file: Path) -> float:
    """Tokens/s one request decodes at on a fresh server of ``-t decode -tb threads`` (prompt
    time excluded, as llama-server times it; the second of two requests)."""
    server = LlamaServerProcess(
        binary, model, [], slots=1, ctx_per_slot=256, threads=threads, decode_threads=decode,
        log=log_file,
    )  # fmt: skip
    began = time.monotonic()
    with server:
        for _ in range(2):
            body = {
                "prompt": "Hello, how can I help you today?",
                "n_predict": PROBE_TOKENS,
                "ignore_eos": True,
                "top_k": 1,
                "samplers": ["top_k"],
                "cache_prompt": False,
            }
            reply = httpx.post(
                f"{server.url}/completion", json=body, headers=server.headers, timeout=60
            )
            reply.raise_for_status()
        rate = float(reply.json()["timings"]["predicted_per_second"])
    log.debug(
        "-t %d: %.1f tokens/s (%.1f s with the start)", decode, rate, time.monotonic() - began
    )
    return rate
