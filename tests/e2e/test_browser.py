"""The whole loop in a real browser: Debian's Chromium driven by Playwright.

The app runs as a subprocess on a tiny llama model (so CI stays fast), in a temporary home.
Screenshots go to test-artifacts/ for a person to look at.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, ROOT, drawn_lines, free_port, shot, wait_for_port, wait_text

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_url(tiny_llama_dir, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    home = tmp_path_factory.mktemp("browser-home")
    port = free_port()
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), "--model", str(tiny_llama_dir)],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_for_port(port, proc, home / "app.log", timeout=120)
    url = f"http://127.0.0.1:{port}/"
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
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


def test_train_a_short_run_and_watch_it(page):
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
    progress = page.inner_text("#train-progress")
    assert "step 12/12" in progress and "tokens/s" in progress
    strokes = drawn_lines(page, "#loss-curve")
    assert len(strokes) == 2 and len(set(strokes)) == 2, f"train and validation lines not drawn: {strokes}"
    shot(page, "01-train-done")


def test_a_second_start_while_training_is_refused_or_runs_after(page):
    # After the run above has finished a new start is allowed; bad settings are refused with reasons.
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
    page.wait_for_timeout(1000)
    page.locator("#eval-adapters input").first.click()
    page.get_by_role("option", name="browser-adapter").click()
    page.keyboard.press("Escape")
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
    assert "intent" in slices and "Δ BLEU [95% CI]" in slices and "browser-adapter BLEU" in slices, slices[:300]
    shot(page, "05-evaluate")


def test_chat_streams_with_the_active_adapter_named(page):
    _tab(page, "Chat")
    wait_text(page, "#chat-status", lambda t: "ready" in t and "browser-adapter" in t, 60)
    # the dropdown the answer is taken from names the active adapter too (it once said "base")
    page.wait_for_function(
        "() => document.querySelector('#chat-adapter input').value === 'browser-adapter'", timeout=30_000)
    _fill(page, "chat-input", "where is my order")
    page.click("#chat-send")
    wait_text(page, "#chatbot", lambda t: "where is my order" in t, 30)
    time.sleep(3)
    shot(page, "03-chat")


def test_compare_shows_labelled_panes_and_saves_feedback(page):
    _tab(page, "Compare")
    page.wait_for_timeout(1000)
    page.click("#compare-go")
    wait_text(page, "#compare-timing", lambda t: "answers decoded" in t, 60)
    labels = page.locator("#compare-pane-0 label, #compare-pane-1 label").all_inner_texts()
    joined = " ".join(labels)
    assert "base" in joined and "browser-adapter" in joined
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
    page.wait_for_function("() => [...document.querySelectorAll('#eval-data textarea, #eval-data input')]"
                           ".some(box => box.value.endsWith('eval.jsonl'))", timeout=30_000)
    shot(page, "05-import-to-evaluate")
