"""Learning from one answer, in Debian's Chromium: chat -> thumbs down and a correction ->
the Review tab accepts and exports it -> the Train tab runs ORPO from the adapter that answered
on the exported pair -> the Evaluate tab gates the new version against that parent -> the new
version answers the same message with the correction's words.

A tiny llama with wide random weights (``varied_dir``: its greedy answers are varied text) and
a shelf adapter on every projection stand in for a real bot, so the run is short. What makes one
pair stick: ORPO (its loss includes the chosen answer's likelihood), a high learning rate and
100 steps, greedy decoding, and the chat asked without a system prompt, as the rating kept it
(Chat keeps the turns, not the system prompt). PyTorch answers (``--engine pytorch``, float32):
llama.cpp's quantized copy is not what this is about.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, ROOT, free_port, shot, wait_for_port, wait_text

from finetune.preference_defaults import METHOD_DEFAULTS

pytestmark = pytest.mark.browser

ASKED = "where is my parcel?"
CORRECTION = "Your parcel arrives on Friday."
ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture
def app_url(varied_dir, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    from shelf_helpers import put_adapter

    home = tmp_path / "home"
    old = os.environ.get("TUNEDESK_HOME")
    os.environ["TUNEDESK_HOME"] = str(home)
    try:
        put_adapter(varied_dir, "support", targets=ALL_PROJECTIONS)  # the bot that answered badly
    finally:
        if old is None:
            os.environ.pop("TUNEDESK_HOME")
        else:
            os.environ["TUNEDESK_HOME"] = old
    port = free_port()
    env = {
        **os.environ,
        "TUNEDESK_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "TUNEDESK_DTYPE": "float32",
    }
    with open(tmp_path / "app.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "app.py",
                "--port",
                str(port),
                "--model",
                str(varied_dir),
                "--engine",
                "pytorch",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, proc, tmp_path / "app.log", timeout=120)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()


def _pick(page, elem_id: str, option: str) -> None:
    page.locator(f"#{elem_id} input").first.click()
    page.get_by_role("option", name=option, exact=True).click()


def _fill(page, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} input, #{elem_id} textarea").first.fill(value)


def _ask(page, adapter: str) -> str:
    """The Chat tab's text once ``adapter`` has answered :data:`ASKED` in a fresh conversation."""
    _tab(page, "Chat")
    if ASKED in page.inner_text("#chatbot"):  # a fresh conversation; Clear empties the message box
        page.click("#chat-clear")  # too, so its reply must be in before typing
        wait_text(page, "#chatbot", lambda t: ASKED not in t, 30)
    _pick(page, "chat-adapter", adapter)
    wait_text(page, "#chat-status", lambda t: f"Active adapter: {adapter} " in t, 60)
    _fill(page, "chat-input", ASKED)
    page.click("#chat-send")
    wait_text(page, "#chatbot", lambda t: ASKED in t, 30)
    seen = [""]

    def ended(text: str) -> bool:  # the streamed answer stopped growing
        done = text == seen[0] and len(text) > len(ASKED) + 2
        seen[0] = text
        time.sleep(0.5)
        return done

    try:
        return wait_text(page, "#chatbot", ended, 60)
    except AssertionError:
        shot(page, "feedback-loop-no-answer")
        raise


def test_a_correction_reviewed_and_trained_in_comes_back_in_the_answer(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(app_url)
        page.wait_for_selector("#tabs")

        # Chat: the bot answers without the system prompt (the turns a rating keeps), badly.
        _tab(page, "Chat")
        page.click("#chat-settings button")
        _fill(page, "chat-system", "")
        before = _ask(page, "support")
        assert "Friday" not in before
        page.locator("#chatbot [aria-label='Dislike']").last.click()
        wait_text(page, "#chat-rated", lambda t: "Saved 👎" in t, 30)
        page.get_by_text("Correct the last answer").click()
        _fill(page, "chat-correction", CORRECTION)
        page.click("#chat-save-correction")
        wait_text(page, "#chat-rated", lambda t: "with your correction" in t, 30)
        shot(page, "feedback-loop-01-chat")

        # Review: the corrected rating, labelled, accepted, exported as a pair.
        _tab(page, "Review")
        wait_text(page, "#review-table", lambda t: CORRECTION in t, 30)
        row = page.locator(
            "#review-table [role=row]", has_text=CORRECTION
        )  # the 👎 with the correction
        row.locator("[role=gridcell]").first.click()
        page.wait_for_function(
            "() => document.querySelector('#review-id input, #review-id textarea')"
            ".value.startsWith('fb-')",
            timeout=30_000,
        )
        _fill(page, "review-label", "delivery_period")
        page.click("#review-save-intent")
        wait_text(page, "#review-said", lambda t: "intent: delivery_period" in t, 30)
        page.click("#review-accept")
        wait_text(page, "#review-said", lambda t: ": accepted" in t, 30)
        _fill(page, "review-name", "loop")
        page.click("#review-export")
        said = wait_text(page, "#review-said", lambda t: "preference pairs" in t, 30)
        assert "1 preference pairs" in said, said
        pairs = re.search(r"(\S+loop-pairs\.jsonl)", said).group(1)
        shot(page, "feedback-loop-02-review")

        # Train: ORPO from the adapter that answered, on the exported pair.
        _tab(page, "Train")
        page.get_by_label("Path on this machine").check()
        _fill(page, "train-path", pairs)
        page.get_by_text("Advanced: LoRA and training settings").click()
        _pick(
            page,
            "train-method",
            "ORPO: an odds-ratio term beside SFT, no reference copy (cheaper on a CPU)",
        )
        # Picking a preference method shows its own learning rate and max steps 0 (its epochs
        # count); the time budget stays: the run trains its epochs or until the budget ends
        learning_rate = page.get_by_label("Learning rate", exact=True)
        page.wait_for_function(
            "() => document.querySelector('#train-steps input').value === '0'", timeout=15000
        )
        assert page.locator("#train-budget input").input_value() == "10"
        assert float(learning_rate.input_value()) == METHOD_DEFAULTS["orpo"].learning_rate
        _fill(page, "train-steps", "100")
        learning_rate.fill("0.02")  # one pair, learned in 100 steps
        _pick(page, "train-from", "support")
        _fill(page, "train-name", "support-orpo")
        page.click("#train-start")
        wait_text(page, "#train-message", lambda t: "Started run" in t or "⚠️" in t, 60)
        result = wait_text(
            page, "#train-result", lambda t: "is on the shelf" in t or "failed" in t, 240
        )
        assert "support-orpo is on the shelf" in result, result
        shot(page, "feedback-loop-03-train")

        # Evaluate: the release gate checks the new version against the one it was tuned from.
        _tab(page, "Evaluate")
        # the tab picks the version just trained by itself (a click on it would take it out)
        wait_text(page, "#eval-adapters", lambda t: "support-orpo" in t, 30)
        page.locator("#eval-rows input[type=number]").fill("6")
        page.locator("#eval-max-new input[type=number]").fill("16")
        page.locator("#eval-golden input").uncheck()
        page.click("#eval-run")
        status = wait_text(page, "#eval-status", lambda t: "Scored" in t or "⚠️" in t, 120)
        assert "Scored 6 rows" in status, status
        gate = page.inner_text("#eval-gate")
        assert re.search(
            r"Release gate of support-orpo against support, the version it was tuned from: "
            r"(passed|failed)",
            gate,
        ), gate
        # one pair learnt by heart at a high learning rate costs perplexity: the gate sees it
        # against the parent, not the base
        assert "perplexity is worse than support beyond chance" in gate, gate
        shot(page, "feedback-loop-04-evaluate")

        # Chat: the new version answers the same message with the correction.
        after = _ask(page, "support-orpo")
        assert "Friday" in after, after
        shot(page, "feedback-loop-05-answer")
        browser.close()
