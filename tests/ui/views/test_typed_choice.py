"""ui/views/typed_choice.py: the page's script covers every dropdown that takes typed text
(what it does on Enter: tests/e2e/test_browser_bad_input.py, in Chromium)."""

from __future__ import annotations

import gradio as gr

from ui.views.typed_choice import ENTER_KEEPS_TYPED_JS, TYPED_IDS


def test_every_dropdown_taking_typed_text_is_in_the_script(home, tiny_llama_dir):
    from ui.app import build_app
    from ui.views.state import AppState

    demo = build_app(state=AppState(str(tiny_llama_dir)))
    typed = [
        block.elem_id
        for block in demo.blocks.values()
        if isinstance(block, gr.Dropdown) and block.allow_custom_value
    ]
    assert sorted(typed, key=str) == sorted(TYPED_IDS)  # an unnamed one (None) fails too
    for elem_id in TYPED_IDS:
        assert f"#{elem_id}" in ENTER_KEEPS_TYPED_JS
