"""Load: the running app answers many concurrent chats while a training run goes, and its
request queue is bounded (an over-full queue is refused with a clear message, memory stays flat).

Everything goes through the app's HTTP API, as a user's browser or script would: chats through
``gradio_client`` (one Client per simulated user), training through the Train tab's Start
endpoint. Latency figures go to ``test-artifacts/load_test.json`` for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from running_app import (
    CHAT,
    START_TRAINING,
    answer_text,
    chat_settings,
    start_app,
    tiny_train_inputs,
    wait_for_run,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PROMPTS = [
    "How do I track my order?",
    "I want a refund for my order.",
    "Where is my invoice?",
    "Can I change my shipping address?",
    "What payment methods do you accept?",
    "please cancel my order asap",
    "hi i need to talk to a human agent",
    "My package arrived damaged.",
]
CONCURRENT_CHATS = 24  # the issue asks for at least 16
MAX_NEW_TOKENS = 24
TRAIN_STEPS = 600  # ~20 s of training loop on 2 cores: longer than the chat burst
QUEUE_MAX = 64  # ui/app.py: demo.queue(max_size=64)
CHAT_RUNNING = (
    32  # ui/tabs/chat.py: CHAT_CONCURRENCY chats stream at once (one batch), beside the queue
)
# The queue is over-filled while three long chats decode: 512 tokens took 8 s on 2 cores under
# load, the burst of posts 2 s (at 1024 the test waited 16 s for them)
LONG_CHAT_TOKENS = 512
HWM_GROWTH_LIMIT_MIB = 300  # peak RSS growth allowed under load (the model is loaded before)


@pytest.fixture(scope="module")
def local_app(varied_dir, tmp_path_factory):
    """The app on the varied tiny llama (greedy answers are varied text), serving float32."""
    # float32: chats decoded together equal their answers alone token for token (in bf16 a
    # batched product rounds differently now and then, docs/benchmarks.md)
    with start_app(
        varied_dir, tmp_path_factory.mktemp("load-home"), env={"TUNEDESK_DTYPE": "float32"}
    ) as app:
        yield app


def _ask(client, prompt: str, max_new_tokens: int = MAX_NEW_TOKENS) -> str:
    return answer_text(client.predict([], prompt, *chat_settings(max_new_tokens), api_name=CHAT))


def _percentiles(values: list[float]) -> dict:
    """Nearest-rank p50/p90/p99, max and mean, in seconds."""
    ordered = sorted(values)
    out = {f"p{q}": ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] for q in (50, 90, 99)}
    out |= {"max": ordered[-1], "mean": sum(ordered) / len(ordered)}
    return {k: round(v, 3) for k, v in out.items()}


def _events(run_dir: Path) -> dict[str, dict]:
    """The last event of each type the training child wrote."""
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return {e["type"]: e for e in map(json.loads, filter(str.strip, lines))}


def _wait_for_training_loop(run_dir: Path, timeout: float = 120) -> None:
    """Block until the child has taken its first optimizer steps (setup is over)."""
    deadline = time.time() + timeout
    while "progress" not in _events(run_dir):
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] in ("queued", "running"), f"training ended early: {status}"
        if time.time() > deadline:
            pytest.fail("training never reached its first step")
        time.sleep(0.2)


def _connect(url: str) -> list:
    """One connected client per simulated user, connected a few at a time (one by one took 6-9 s
    on 2 cores)."""
    from gradio_client import Client

    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(lambda _: Client(url, verbose=False), range(CONCURRENT_CHATS)))


def _concurrent_chats(clients: list) -> tuple[list[dict], float]:
    """Fire one chat per client at once; time each one."""
    barrier = threading.Barrier(CONCURRENT_CHATS)
    results: list[dict] = [{} for _ in clients]

    def user(i: int) -> None:
        prompt = PROMPTS[i % len(PROMPTS)]
        barrier.wait()
        start = time.time()
        try:
            results[i] = {"prompt": prompt, "answer": _ask(clients[i], prompt), "error": None}
        except Exception as err:  # recorded and asserted on: any error fails the test
            results[i] = {"prompt": prompt, "answer": "", "error": f"{type(err).__name__}: {err}"}
        results[i].update(start=start, end=time.time())

    threads = [threading.Thread(target=user, args=(i,)) for i in range(CONCURRENT_CHATS)]
    burst_start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, burst_start


def _overfill_queue(url: str) -> dict:
    """Queue three long chats, then far more short ones than the queue holds; count refusals."""
    import httpx
    from gradio_client import Client

    long_chats = [
        Client(url, verbose=False).submit(
            [], "Tell me everything.", *chat_settings(LONG_CHAT_TOKENS), api_name=CHAT
        )
        for _ in range(3)
    ]
    deadline = time.time() + 60
    while not long_chats[0].outputs() and time.time() < deadline:  # the first one is generating
        time.sleep(0.05)
    body = {"data": [[], "short question", *chat_settings(1)]}
    with httpx.Client(base_url=url, timeout=30) as http:

        def post(_) -> tuple[int, str]:
            r = http.post("gradio_api/call/chat", json=body)
            return r.status_code, r.text

        # Short chats drain while the burst is posted (they run beside the long ones), so the bound
        # is checked on the queue's own size, sampled through the burst, not on the count accepted.
        sizes, burst_done = [], threading.Event()

        def sample_queue_size():
            with httpx.Client(base_url=url, timeout=30) as probe:
                while not burst_done.is_set():
                    sizes.append(probe.get("gradio_api/queue/status").json()["queue_size"])
                    time.sleep(0.02)

        sampler = threading.Thread(target=sample_queue_size)
        sampler.start()
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(post, range(QUEUE_MAX + CHAT_RUNNING + 30)))
        burst_done.set()
        sampler.join()
        still_busy = not long_chats[-1].done()
        for job in long_chats:
            job.result(timeout=180)
        deadline = time.time() + 120  # the accepted short chats drain
        while time.time() < deadline and http.get("gradio_api/queue/status").json()["queue_size"]:
            time.sleep(0.5)
    refused = [(code, text) for code, text in replies if code != 200]
    return {
        "posted": len(replies),
        "accepted": len(replies) - len(refused),
        "refused": len(refused),
        "refusal_codes": sorted({code for code, _ in refused}),
        "refusal_message": refused[0][1] if refused else None,
        "long_chats_busy": still_busy,
        "largest_queue": max(sizes, default=0),
    }


def test_many_chats_while_training_then_an_overfull_queue(local_app, varied_dir, monkeypatch):
    from gradio_client import Client

    client = Client(local_app.url, verbose=False)
    _ask(client, "warm-up")  # loads the model
    # Answers with no load: greedy decoding, so the same prompt must give the same answer later.
    alone, alone_latencies = {}, []
    for prompt in PROMPTS:
        start = time.time()
        alone[prompt] = _ask(client, prompt)
        alone_latencies.append(time.time() - start)
    assert all(alone.values()), alone
    hwm_warm = local_app.memory_kib("VmHWM")

    message = client.predict(
        *tiny_train_inputs(varied_dir, "load-adapter", TRAIN_STEPS), api_name=START_TRAINING
    )
    run_id = re.search(r"Started run `([^`]+)`", message)
    assert run_id, message
    run_dir = local_app.home / "runs" / run_id.group(1)
    users = _connect(local_app.url)  # while the training child starts (about twice as long)
    _wait_for_training_loop(run_dir)

    results, burst_start = _concurrent_chats(users)
    status = wait_for_run(local_app.home, run_id.group(1))
    hwm_after_chats = local_app.memory_kib("VmHWM")

    errors = [r for r in results if r["error"]]
    assert not errors, errors[:3]
    assert all(r["answer"] for r in results)
    wrong = [r for r in results if r["answer"] != alone[r["prompt"]]]
    assert not wrong, f"answers under load differ from answers alone: {wrong[:2]}"

    events = _events(run_dir)
    during = sum(r["end"] < events["done"]["time"] for r in results)
    assert burst_start < events["done"]["time"] and during >= 1, "the chats missed the training"
    assert status["state"] == "done" and status.get("adapter") == "load-adapter", status
    monkeypatch.setenv("TUNEDESK_HOME", str(local_app.home))
    from adapters.shelf.store import Shelf

    assert Shelf().get("load-adapter").ok

    overflow = _overfill_queue(local_app.url)
    assert overflow["long_chats_busy"], "the queue drained before it could be over-filled"
    assert overflow["refused"] >= 1 and overflow["refusal_codes"] == [503], overflow
    assert "Queue is full" in overflow["refusal_message"], overflow
    assert 0 < overflow["largest_queue"] <= QUEUE_MAX, overflow
    assert _ask(client, PROMPTS[0]) == alone[PROMPTS[0]]  # still serving, same answer
    hwm_end = local_app.memory_kib("VmHWM")
    assert (hwm_end - hwm_warm) / 1024 < HWM_GROWTH_LIMIT_MIB, (hwm_warm, hwm_after_chats, hwm_end)

    report = {
        "concurrent_chats": CONCURRENT_CHATS,
        "max_new_tokens": MAX_NEW_TOKENS,
        "count": len(results),
        "errors": len(errors),
        "latency_s": _percentiles([r["end"] - r["start"] for r in results]),
        "latency_alone_s": _percentiles(alone_latencies) | {"count": len(alone_latencies)},
        "burst_wall_s": round(max(r["end"] for r in results) - burst_start, 3),
        "completed_while_training": during,
        "training": {
            "steps": events["done"].get("step"),
            "state": status["state"],
            "adapter": status.get("adapter"),
            "loop_s": round(events["done"]["time"] - events["start"]["time"], 2),
        },
        "queue_overflow": overflow,
        "app_peak_rss_mib": {
            "warm": round(hwm_warm / 1024),
            "after_chats": round(hwm_after_chats / 1024),
            "after_overflow": round(hwm_end / 1024),
        },
        "model": "tiny llama (2 layers, hidden 64; tests/conftest.py varied_dir), CPU",
    }
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "load_test.json").write_text(json.dumps(report, indent=2))
