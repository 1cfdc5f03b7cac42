"""Bad input in a real browser (Debian's Chromium through Playwright): each value the app
refuses is refused in a sentence saying what is allowed, never Gradio's bare "Error" nor a
value silently swapped for another (the page's own script keeps Enter in a typed dropdown from
swapping the text for the first option it filters to, which a handler call cannot reach).

The app runs as a subprocess on a tiny llama model in a temporary home, as in test_browser.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, ROOT, free_port, wait_for_port, wait_text

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(tiny_llama_dir, tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    home, port = tmp_path_factory.mktemp("bad-input-home"), free_port()
    env = {**os.environ, "TUNEDESK_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    with open(home / "app.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), "--model", str(tiny_llama_dir)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, proc, home / "app.log", timeout=120)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#train-check")
            yield page
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _fill(page, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} input, #{elem_id} textarea").first.fill(value)


def _check(page, expect: str) -> str:
    """Press Check; the Train tab's message once it holds ``expect`` (or a bare "Error")."""
    page.click("#train-check")
    return wait_text(
        page, "#train-message", lambda t: expect in t or t.strip().endswith("Error"), 60
    )


def _toasts(page) -> list[str]:
    return page.locator(".toast-body").all_inner_texts()


def test_gradient_accumulation_0_and_a_negative_budget_say_what_is_allowed(page):
    page.get_by_label("Gradient accumulation").fill("0")
    _fill(page, "train-budget", "-5")
    text = _check(page, "These settings cannot run")
    # Gradio's own minimum check answered "Error" here, and a toast of its own wording
    assert "These settings cannot run" in text, (text, _toasts(page))
    assert "gradient accumulation must be a whole number between 1 and 4096 (got 0)" in text
    assert (
        "time budget (minutes) must be 0 (off) or between 0.5 (30 seconds) and 10080 (7 days) "
        "(got -5)" in text
    )
    assert not any("minimum value" in t for t in _toasts(page))
    page.get_by_label("Gradient accumulation").fill("1")
    _fill(page, "train-budget", "10")


def test_the_advanced_number_boxes_say_what_is_allowed(page):
    page.get_by_text("Advanced: LoRA and training settings").click()
    _fill(page, "train-top-layers", "-1")
    _fill(page, "train-passage-share", "2")
    refused = "LoRA top layers must be a whole number between 0 and 10000 (got -1)"
    text = _check(page, refused)
    assert refused in text, text
    assert "share of training rows shown passages must be a number between 0.0 and 1.0" in text
    _fill(page, "train-top-layers", "0")
    _fill(page, "train-passage-share", "1")
    page.get_by_text("Advanced: LoRA and training settings").click()


def test_a_held_out_share_out_of_range_is_said_in_words(page, tmp_path):
    export = tmp_path / "tickets.csv"
    export.write_text(
        "ticket_id,role,text\n1,customer,Where is my parcel?\n1,agent,On its way.\n"
        "2,customer,Can I get a refund?\n2,agent,Yes within 30 days.\n"
    )
    page.get_by_text("Import a helpdesk export (tickets → redacted conversations)").click()
    _fill(page, "import-path", str(export))
    page.get_by_label("Held out for evaluation").fill("1.5")
    page.click("#import-run")
    text = wait_text(page, "#import-report", lambda t: "⚠️" in t or "Error" in t, 60)
    assert "held out for evaluation must be at least 0 and below 1 (got 1.5)" in text, text
    page.get_by_text("Import a helpdesk export (tickets → redacted conversations)").click()


def test_a_typed_batch_of_0_is_refused_not_replaced_by_a_listed_size(page):
    box = page.locator("#train-batch input, #train-batch textarea").first
    box.fill("0")
    box.press("Enter")  # a dropdown's filter picked "1024" (it holds a 0) on Enter
    assert box.input_value() == "0"
    refused = "batch size must be a whole number between 1 and 4096, or auto (got 0)"
    assert refused in _check(page, refused)
    box.fill("eight")
    refused = "batch size must be auto or a whole number (got 'eight')"
    assert refused in _check(page, refused)
    box.fill("auto")
    assert "Settings are valid" in _check(page, "Settings are valid")


def test_a_refused_name_shows_every_character_it_names(page):
    """The page's Markdown read the sentence's backslash as an escape and dropped it."""
    _fill(page, "train-name", "support/bot")
    refused = "invalid adapter name 'support/bot'"
    text = _check(page, refused)
    assert "(no '/', '\\' or '..')" in text, text
    _fill(page, "train-name", "")


def _type_into_picker(page, text: str, *keys: str):
    box = page.locator("#train-model input").first
    box.click()
    box.fill("")
    box.type(text)
    for key in (*keys, "Enter"):
        page.keyboard.press(key)
    return box


def test_enter_in_the_base_model_picker_keeps_what_was_typed(page, tmp_path):
    """Enter picked the first option the text filtered to: "qwen3" became Qwen3 0.6B, "smol"
    SmolLM2 135M Instruct, without a word."""
    cost = "#train-model-cost"
    box = _type_into_picker(page, "smol")
    said = wait_text(page, cost, lambda t: "'smol'" in t, 30)
    assert box.input_value() == "smol"
    assert "did you mean SmolLM2 135M Instruct or SmolLM2 360M Instruct?" in said, said
    folder = tmp_path / "qwen3"  # a local folder whose name is part of a listed model's
    folder.mkdir()
    box = _type_into_picker(page, str(folder))
    wait_text(page, cost, lambda t: "'smol'" not in t, 30)
    assert box.input_value() == str(folder)
    box = _type_into_picker(page, "SmolLM2 360M Instruct")  # a listed name in full: that model
    wait_text(page, cost, lambda t: "Measured cost of SmolLM2 360M Instruct" in t, 30)
    assert box.input_value().startswith("SmolLM2 360M Instruct (")
    box = _type_into_picker(page, "gemma", "ArrowDown")  # reached with the arrow keys: picked
    wait_text(page, cost, lambda t: "Measured cost of Gemma 3 270M" in t, 30)
    assert box.input_value().startswith("Gemma 3 270M (")


def test_knowledge_hits_follow_the_version_picked(page, tmp_path):
    """A search's hits stayed on screen when another version was picked."""
    faq = tmp_path / "faq.csv"
    faq.write_text("question,answer\nhow do I reset my password,Use the forgot password link.\n")
    help_md = tmp_path / "help.md"
    help_md.write_text("# Refunds\nRefunds are paid within 30 days.\n")
    page.click("button[role=tab]:has-text('Knowledge')")
    for n, file in enumerate((help_md, faq), start=1):
        page.locator("#knowledge-files input[type=file]").set_input_files(str(file))
        page.click("#knowledge-import")
        wait_text(page, "#knowledge-said", lambda t, n=n: f"into articles v{n} " in t, 60)
    page.locator("#knowledge-query textarea, #knowledge-query input").first.fill("password")
    page.click("#knowledge-search")
    hits = "#knowledge-hits"
    wait_text(page, hits, lambda t: "how do I reset my password" in t, 30)
    page.locator("#knowledge-version input").first.click()
    page.get_by_role("option", name="v1").click()
    said = wait_text(page, "#knowledge-searched", lambda t: "Nothing in" in t, 30)
    assert said.startswith("Nothing in articles v1 matched 'password'"), said
    assert "how do I reset my password" not in page.inner_text(hits)


def test_enter_in_the_other_typed_dropdowns_keeps_what_was_typed(page):
    """The same hole as the model picker's in every dropdown that takes typed text: a column
    'cat' typed into Slice by column became 'category' on Enter (an alias 'bot' typed beside
    'support-bot' became that alias, and Set split then changed it)."""
    page.click("button[role=tab]:has-text('Evaluate')")
    box = page.locator("#eval-slice-by input").first
    box.click()
    box.fill("")
    box.type("cat")
    page.keyboard.press("Enter")
    page.wait_for_timeout(500)
    assert box.input_value() == "cat"
    page.click("button[role=tab]:has-text('Train')")
