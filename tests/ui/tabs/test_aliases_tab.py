"""The Adapters tab's aliases section, its handlers called as the buttons would call them."""

from __future__ import annotations

from alias_helpers import FAILED, PASSED, put_versions
from ui_handlers import handlers


def test_set_promote_and_refresh_through_the_tabs_handlers(home, tiny_llama_dir, random_lora_dir):
    put_versions(random_lora_dir, {"v3": PASSED, "v4": FAILED})
    table = handlers(tiny_llama_dir)
    said = table["on_alias_set"]("support-bot", "v3=100", None, False, "")
    assert said == "support-bot: (none) → v3 100%."
    refused = table["on_alias_promote"]("support-bot", "", "v4", False, "")
    assert refused.startswith("⚠️ release gate of v4: failed")
    assert "Override for v4" in table["on_alias_promote"]("support-bot", "", "v4", True, "canary of the fix")
    names, versions, about, rows, frame = table["refresh_aliases"]("support-bot", "requests")
    assert names["choices"] == ["support-bot"] and set(versions["choices"]) == {"v3", "v4"}
    assert "v4                               100%" in about and "by page (ui)" in about
    assert [row[:3] for row in rows] == [["v3", 0, 0], ["v4", 100, 0]] and frame.empty
    state = table["engine"]
    state.alias_stats.record("v4", "ok", 0.2, 1.5)
    rows, frame = table["alias_figures"]("support-bot", "answer p95 (s)")
    assert rows[1][2] == 1 and frame["value"].tolist() == [1.5]
    assert table["on_alias_rollback"]("support-bot", "", "", False, "")== "support-bot: v3 0% · v4 100% → v3 100%."
