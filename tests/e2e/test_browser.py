"""The whole loop in a real browser: Debian's Chromium driven by Playwright.

The app runs as a subprocess on a tiny llama model (so CI stays fast), in a temporary home.
Screenshots go to test-artifacts/ for a person to look at. The last test stands alone: an
alias's canary judged by its figures in the Adapters tab after traffic through ``/v1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_helpers import (
    CHROMIUM,
    ROOT,
    bot_answer,
    drawn_lines,
    free_port,
    shot,
    wait_for_port,
    wait_text,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_home(tmp_path_factory) -> Path:
    """The app's TUNEDESK_HOME (tests put adapters and aliases there as the CLI would)."""
    return tmp_path_factory.mktemp("browser-home")


@pytest.fixture(scope="module")
def app_url(tiny_llama_dir, app_home):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    home = app_home
    port = free_port()
    env = {
        **os.environ,
        "TUNEDESK_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "TUNEDESK_ALIAS_PLOT_BUCKET_S": "1",
    }  # the aliases' plots: a point per second, not per 15 s
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), "--model", str(tiny_llama_dir)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wait_for_port(port, proc, home / "app.log", timeout=120)
    url = f"http://127.0.0.1:{port}/"
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(app_url)
        page.wait_for_selector("#tabs")
        yield page
        browser.close()


def _fill(page, elem_id: str, value: str) -> None:
    """Fill a Gradio text or number box by its elem_id (input or textarea inside it)."""
    page.locator(f"#{elem_id} input, #{elem_id} textarea").first.fill(value)


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def test_train_a_short_run_and_watch_it(page, app_home):
    _tab(page, "Train")
    page.get_by_text("Advanced: LoRA and training settings").click()
    _fill(page, "train-budget", "0")  # 12 steps rather than the default 10 minutes
    _fill(page, "train-steps", "12")
    _fill(page, "train-samples", "64")
    _fill(page, "train-eval-every", "4")
    _fill(page, "train-name", "browser-adapter")
    page.click("#train-start")
    wait_text(page, "#train-message", lambda t: "Started run" in t, 30)
    text = wait_text(page, "#train-result", lambda t: "browser-adapter" in t, 240)
    assert "is on the shelf" in text
    (config,) = (app_home / "runs").glob("*/config.json")  # opening Advanced kept them auto
    cadence = json.loads(config.read_text())["train"]
    assert (cadence["eval_every"], cadence["probe_every"], cadence["save_every"]) == (4, None, None)
    progress = page.inner_text("#train-progress")
    assert "step 12/12" in progress and "tokens/s" in progress
    strokes = drawn_lines(page, "#loss-curve")
    assert len(strokes) == 2 and len(set(strokes)) == 2, (
        f"train and validation lines not drawn: {strokes}"
    )
    shot(page, "01-train-done")


def test_a_second_start_while_training_is_refused_or_runs_after(page):
    # After the run above has finished a new start is allowed; bad settings are
    # refused with reasons.
    _tab(page, "Train")
    _fill(page, "train-steps", "-3")
    page.click("#train-check")
    text = wait_text(page, "#train-message", lambda t: "cannot run" in t, 30)
    assert "max steps" in text
    _fill(page, "train-steps", "12")


def test_adapters_tab_lists_and_activates(page):
    _tab(page, "Adapters")
    wait_text(page, "#shelf-table", lambda t: "browser-adapter" in t, 30)
    page.click("#shelf-activate")
    text = wait_text(page, "#shelf-message", lambda t: "active" in t, 60)
    assert "browser-adapter" in text
    shot(page, "02-adapters")


def test_evaluate_scores_base_and_adapter_on_the_same_rows(page):
    _tab(page, "Evaluate")
    # the adapter trained above is already picked, and no empty table shows before a run
    wait_text(page, "#eval-adapters", lambda t: "browser-adapter" in t, 30)
    for table in ("eval-metrics", "eval-samples"):
        assert not page.locator(f"#{table}").is_visible(), table
    page.locator("#eval-rows input[type=number]").fill("6")
    page.locator("#eval-max-new input[type=number]").fill("16")
    page.locator("#eval-golden input").uncheck()
    page.click("#eval-run")
    text = wait_text(page, "#eval-status", lambda t: "Scored" in t or "⚠️" in t, 240)
    assert "Scored 6 rows" in text, text
    table = page.inner_text("#eval-metrics")
    assert "base" in table and "browser-adapter" in table
    # sliced by intent (the default; the demo data has it), with the adapter's gate verdict
    assert "Release gate of browser-adapter" in page.inner_text("#eval-gate")
    slices = page.inner_text("#eval-slices")
    assert (
        "intent" in slices and "Δ BLEU [95% CI]" in slices and "browser-adapter BLEU" in slices
    ), slices[:300]
    # the support checks: per model after the classifier's ceiling, per intent, the worst answers
    support = page.inner_text("#eval-support")
    assert "reference answers (ceiling)" in support and "browser-adapter" in support, support[:300]
    assert "browser-adapter right intent" in page.inner_text("#eval-intents")
    assert "browser-adapter answer" in page.inner_text("#eval-worst")
    assert "right-intent rate" in page.inner_text("#eval-gate")
    shot(page, "05-evaluate")


def test_chat_streams_with_the_active_adapter_named(page, app_url):
    import httpx

    _tab(page, "Chat")
    status = wait_text(page, "#chat-status", lambda t: "ready" in t and "browser-adapter" in t, 60)
    # the dropdown the answer is taken from names the active adapter too (it once said "base")
    page.wait_for_function(
        "() => document.querySelector('#chat-adapter input').value === 'browser-adapter'",
        timeout=30_000,
    )
    page.get_by_text("System prompt and generation settings").click()
    page.fill("#chat-repetition input[type=number]", "1")  # greedy, as the API below answers
    page.press("#chat-repetition input[type=number]", "Tab")
    _fill(page, "chat-input", "where is my order")
    page.click("#chat-send")
    wait_text(page, "#chatbot", lambda t: "where is my order" in t, 30)
    # once the answer is in, the intent it addressed (the adapter's training data has intents; the
    # tiny model's answer may be empty, which addresses none)
    wait_text(page, "#chat-intent", lambda t: "Last answer addressed: " in t, 90)
    answer = bot_answer(page)
    # the bot's own message is the adapter's greedy answer: what the API beside the page gives
    # for the same conversation from the same engine
    system = page.input_value("#chat-system textarea")
    named = status.partition("Answers from:")[2].strip().removeprefix("engine: ")
    engine = "llama.cpp" if named.startswith("llama.cpp") else "pytorch"
    asked = [
        {"role": "system", "content": system},
        {"role": "user", "content": "where is my order"},
    ]
    reply = httpx.post(
        f"{app_url}v1/chat/completions",
        timeout=120,
        headers={"X-TuneDesk-Engine": engine},
        json={"model": "browser-adapter", "temperature": 0, "max_tokens": 200, "messages": asked},
    )
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0, reply.text
    # (the page shows it stripped: this tiny adapter's greedy answer may be blanks alone, which a
    # page showing the question, another adapter's answer or no answer would still not match)
    want = reply.json()["choices"][0]["message"]["content"].strip()
    assert answer is not None and answer != "where is my order", answer
    assert answer == want, (answer, reply.text)
    shot(page, "03-chat")


def test_compare_shows_labelled_panes_and_saves_feedback(page, tiny_llama_dir):
    _tab(page, "Compare")
    page.wait_for_timeout(1000)
    page.click("#compare-go")
    wait_text(page, "#compare-timing", lambda t: "answers decoded" in t, 60)
    labels = page.locator("#compare-pane-0 label, #compare-pane-1 label").all_inner_texts()
    # each answer names the model that gave it (the tiny model's folder, the adapter), not "pane N"
    assert labels[0].startswith(f"base model {tiny_llama_dir.name} · version "), labels
    assert labels[1].startswith("adapter browser-adapter · version "), labels
    joined = " ".join(labels)
    assert joined.count("addressed: ") == 2, (
        joined
    )  # each pane names the intent its answer addressed
    page.get_by_label("browser-adapter", exact=False).last.check()
    page.click("#compare-save")
    wait_text(page, "#compare-saved", lambda t: "Saved" in t, 30)
    shot(page, "04-compare")


def test_a_helpdesk_import_hands_its_held_out_conversations_to_evaluate(page):
    _tab(page, "Train")
    page.get_by_text("Import a helpdesk export").click()
    _fill(page, "import-path", str(ROOT / "assets" / "demo_helpdesk_export.csv"))
    page.click("#import-run")
    report = wait_text(page, "#import-report", lambda t: "Imported" in t or "⚠️" in t, 60)
    assert "now the Evaluate tab's dataset" in report, report
    _tab(page, "Evaluate")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#eval-data textarea, #eval-data input')]"
        ".some(box => box.value.endsWith('eval.jsonl'))",
        timeout=30_000,
    )
    shot(page, "05-import-to-evaluate")


def test_the_knowledge_tab_keeps_and_forgets_a_warm_up(page, app_home):
    from knowledge.passages import Passage
    from knowledge.store import KnowledgeShelf

    refund = Passage("Refunds", "Refunds reach your card in 5 days.", "kb.md#Refunds")
    _as_app(app_home, lambda: KnowledgeShelf().add("browser-faq", [refund], ["kb.md"]))
    _tab(page, "Knowledge")
    page.get_by_text("Kept warm-ups: knowledge read ahead into llama-server").click()
    _fill(page, "knowledge-warm-model", "no-such-model")
    _fill(page, "knowledge-warm-knowledge", "browser-faq")
    page.click("#knowledge-warm-keep")
    # a refusal is a warning on the page, and nothing is kept
    page.locator(".toast-body", has_text="no model named 'no-such-model'").wait_for()
    _fill(page, "knowledge-warm-model", "base")
    page.click("#knowledge-warm-keep")
    wait_text(page, "#knowledge-said", lambda t: "Kept: base" in t, 30)
    # the replay ran at once: it read the one passage where llama-server serves, and says why
    # not where it does not, or not yet (the app picks its engine by what this machine has
    # built, and starts llama-server in the background)
    done = ("warmed base with 1 of 1 passages of browser-faq", "did not run: warming needs")

    def replayed(text: str) -> bool:
        if any(line in text for line in done):
            return True
        page.click("#knowledge-warm-refresh")
        return False

    kept = wait_text(page, "#knowledge-warm-kept", replayed, 120)
    assert "base" in kept and "browser-faq" in kept, kept
    shot(page, "06-knowledge-warm")
    page.click("#knowledge-warm-forget")
    wait_text(page, "#knowledge-said", lambda t: "Forgot base's warm-up" in t, 30)
    wait_text(page, "#knowledge-warm-kept", lambda t: "browser-faq" not in t, 30)


def _as_app(home: Path, work):
    """``work()`` with the app's home as TUNEDESK_HOME (the shelf and aliases as the
    CLI writes them)."""
    old = os.environ.get("TUNEDESK_HOME")
    os.environ["TUNEDESK_HOME"] = str(home)
    try:
        return work()
    finally:
        if old is None:
            os.environ.pop("TUNEDESK_HOME")
        else:
            os.environ["TUNEDESK_HOME"] = old


def _traffic(
    url: str, seconds: float, prefix: str, each: int = 3
) -> dict[str, list[tuple[str, str]]]:
    """Fresh conversations on ``support-bot`` through /v1, one after another, answered by
    PyTorch, for ``seconds`` and until each version has ``each`` answers: version ->
    [(conversation, completion id)]."""
    import httpx

    got: dict[str, list] = {}
    deadline, n = time.time() + seconds, 0
    with httpx.Client(base_url=url, timeout=60) as client:
        while time.time() < deadline or len(got) < 2 or min(map(len, got.values())) < each:
            assert n < 500, got
            n += 1
            conversation = f"{prefix}-{n}"
            answer = client.post(
                "v1/chat/completions",
                json={
                    "model": "support-bot",
                    "max_tokens": 2,
                    "messages": [{"role": "user", "content": "where is my order"}],
                },
                headers={"X-TuneDesk-Conversation": conversation, "X-TuneDesk-Engine": "pytorch"},
            )
            assert answer.status_code == 200, answer.text
            got.setdefault(answer.headers["X-TuneDesk-Version"], []).append(
                (conversation, answer.json()["id"])
            )
    return got


def test_the_alias_plots_show_the_canarys_figures(page, app_url, app_home, random_lora_dir):
    import httpx
    from alias_helpers import PASSED, put_versions

    from adapters.shelf.aliases import AliasBook

    _as_app(app_home, lambda: put_versions(random_lora_dir, {"bot-v1": PASSED, "bot-v2": PASSED}))
    _as_app(
        app_home, lambda: AliasBook().set("support-bot", {"bot-v1": 50, "bot-v2": 50}, by="test")
    )
    api = app_url.rstrip("/")

    def rate(answers, rating):
        assert (
            httpx.post(
                f"{api}/v1/feedback", json={"id": answers[0][1], "rating": rating}
            ).status_code
            == 200
        )

    early = _traffic(api, 1.5, "early")
    rate(early["bot-v2"], "down")
    rate(early["bot-v1"], "up")
    late = _traffic(api, 1.5, "late")
    rate(late["bot-v2"], "down")  # 1.5 s after the first: the thumbs-down rate gets two points
    weights = app_home / "adapters" / "bot-v2" / "adapter_model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good + b"\0")  # a bad copy of the canary: its conversations fail
    for conversation, _ in late["bot-v2"][:3]:
        failed = httpx.post(
            f"{api}/v1/chat/completions",
            json={
                "model": "support-bot",
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "and now?"}],
            },
            headers={"X-TuneDesk-Conversation": conversation, "X-TuneDesk-Engine": "pytorch"},
        )
        assert failed.status_code == 400
    weights.write_bytes(good)  # restored: its ratings count again
    canary = len(early["bot-v2"]) + len(late["bot-v2"]) + 3

    _tab(page, "Adapters")
    page.get_by_text("Aliases: one model name, canary traffic, rollback").click()
    page.click("#alias-refresh")
    cells = wait_text(page, "#alias-stats", lambda t: "bot-v2" in t and "0 / 2" in t, 30).split(
        "\n"
    )
    row = cells[cells.index("bot-v2") :][:7]  # one cell a line
    assert row[:4] == ["bot-v2", "50", str(canary), "3"], row
    assert all(p != "—" for p in row[4].split(" / ") + row[5].split(" / ")), (
        row
    )  # p50 / p95 of both kinds
    assert row[6] == "1.00 (0 / 2)", row
    for metric, versions in (
        ("requests", 2),
        ("errors", 2),
        ("first token p50 (s)", 2),
        ("first token p95 (s)", 2),
        ("thumbs-down rate", 1),
    ):
        page.locator("#alias-metric").get_by_label(metric, exact=True).check()
        deadline = time.time() + 20
        while len(set(drawn_lines(page, "#alias-plot"))) != versions and time.time() < deadline:
            time.sleep(0.3)
        assert len(set(drawn_lines(page, "#alias-plot"))) == versions, metric
        assert "bot-v2" in page.inner_text("#alias-plot"), metric  # the legend names the canary
    shot(page, "06-alias-canary")
