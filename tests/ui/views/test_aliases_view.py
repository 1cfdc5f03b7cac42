"""The Adapters tab's aliases behind the page: the CLI's sentences, the gate's refusal, the
live figures as rows and as the plot's frame."""

from __future__ import annotations

import pytest
from alias_helpers import FAILED, PASSED, put_versions

from serve.version_stats import VersionStats
from ui.views import aliases as view


@pytest.fixture
def shelf(home, random_lora_dir):
    return put_versions(random_lora_dir, {"v3": PASSED, "v4": PASSED, "v5": FAILED})


def test_changes_say_what_they_did_and_refusals_start_with_a_warning(shelf, home):
    assert view.change("set", "support-bot", "v3=90 v4=10", "", False, "", "ana (ui)") == (
        "support-bot: (none) → v3 90% · v4 10%."
    )
    refused = view.change("promote", "support-bot", "", "v5", False, "", "ana (ui)")
    assert refused.startswith("⚠️ release gate of v5: failed") and refused.endswith(
        "evaluate it (the Evaluate tab), or tick Override the release gate and give a reason"
    )  # the tab's own controls; the CLI's sentence names --force --reason
    assert view.change("promote", "support-bot", "", "v5", True, "", "ana (ui)") == (
        "⚠️ an override (Override the release gate) needs a reason saying why (Reason for the "
        "override); the audit log keeps it"
    )
    forced = view.change("promote", "support-bot", "", "v5", True, "hotfix", "ana (ui)")
    assert "Override for v5" in forced and "'hotfix'" in forced
    assert view.change("rollback", "support-bot", "", "", False, "", "ana (ui)").endswith(
        "→ v3 90% · v4 10%."
    )
    assert view.change("set", "support-bot", "v3=50", "", False, "", "x").startswith(
        "⚠️ the weights must sum"
    )
    assert view.names() == ["support-bot"]
    shown = view.details("support-bot")
    assert "release gate: passed" in shown and "by ana (ui)" in shown
    assert view.details("nobody").startswith("⚠️ no alias named 'nobody'")
    assert "Deleted alias support-bot" in view.change(
        "delete", "support-bot", "", "", False, "", "x"
    )


def test_figures_and_the_plot_frame_show_each_versions_answers(shelf):
    view.change("set", "support-bot", "v3=90 v4=10", "", False, "", "x")
    stats = VersionStats()
    for seconds in (1.0, 2.0, 3.0):
        stats.record("v4", "ok", seconds / 10, seconds)
    stats.record("v4", "error")
    rows = {row[0]: row for row in view.figures(stats, "support-bot")}
    assert rows["v4"][1:4] == [10, 4, 1] and rows["v4"][5] == "2.00 / 3.00"
    assert rows["v3"][2] == 0 and rows["v3"][5] == "— / —"
    frame = view.plot_frame(stats, "support-bot", "answer p95 (s)")
    assert list(frame.columns) == ["time", "version", "value"] and frame["version"].tolist() == [
        "v4"
    ]
    assert frame["value"].tolist() == [3.0]
    assert view.figures(stats, None) == [] and view.plot_frame(stats, "nobody", "requests").empty


def test_the_plot_bucket_comes_from_the_environment_and_a_bad_one_is_named(monkeypatch):
    assert view.plot_bucket_s() == 15.0
    monkeypatch.setenv("TUNEDESK_ALIAS_PLOT_BUCKET_S", "1")
    assert view.plot_bucket_s() == 1.0
    monkeypatch.setenv("TUNEDESK_ALIAS_PLOT_BUCKET_S", "0.01")
    with pytest.raises(
        ValueError, match="TUNEDESK_ALIAS_PLOT_BUCKET_S must be a number of seconds from 1"
    ):
        view.plot_bucket_s()


def test_buckets_of_one_second_and_the_thumbs_down_plot(shelf, home):
    import time

    from feedback.store import FeedbackStore

    view.change("set", "support-bot", "v3=90 v4=10", "", False, "", "x")
    now = [time.time()]
    stats = VersionStats(clock=lambda: now[0])
    for _ in range(3):
        stats.record("v4", "ok", 0.1, 1.0)
        now[0] += 1
    frame = view.plot_frame(stats, "support-bot", "requests", bucket_s=1)
    assert frame["value"].tolist() == [1, 1, 1] and frame["time"].is_monotonic_increasing
    created = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now[0] - 2))
    FeedbackStore().add(
        {"adapter": "v4", "version": "", "rating": "down", "created": created},
        {"adapter": "v4", "version": "", "rating": "up", "created": created},
    )
    thumbs = view.plot_frame(stats, "support-bot", "thumbs-down rate", bucket_s=1)
    assert thumbs["version"].tolist() == ["v4"] and thumbs["value"].tolist() == [0.5]


def test_the_automatic_rollback_as_the_form_sets_and_shows_it(shelf):
    view.change("set", "support-bot", "v3=90 v4=10", "", False, "", "x")
    assert view.policy_fields("support-bot") == (0.0, 50, 10) == view.policy_fields(None)
    said = view.set_policy("support-bot", 0.15, 30.0, None, "ana (ui)")
    assert said.endswith(
        "Automatic rollback: when a canary's error rate (after 30 requests) or thumbs-down rate "
        "(after 10 ratings) exceeds the stable version's by more than 0.15."
    )
    assert view.policy_fields("support-bot") == (0.15, 30, 10)
    assert "automatic rollback: when a canary's error rate" in view.details("support-bot")
    assert view.set_policy("nobody", 0.1, 30, 10, "x") == (
        "⚠️ no alias named 'nobody' yet; give it versions first: type a split (`VERSION=100`) "
        "and press **Set split**"
    )  # the CLI's sentence gives `python -m adapters alias set nobody VERSION=100`
    assert view.set_policy("support-bot", None, 30, 10, "x").endswith("Automatic rollback: off.")


def test_a_refused_alias_name_keeps_its_backslash_in_the_markdown_line(home):
    said = view.change("set", "bad/name", "v3=100", "", False, "", "x")
    # the tab's line is Markdown, which drops a lone backslash: it is sent doubled, shown single
    assert said.startswith("⚠️ invalid alias name 'bad/name'") and "'\\\\'" in said, said
