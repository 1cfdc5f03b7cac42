"""The release gate's rules file, its recorded verdict and when that verdict stops counting."""

from __future__ import annotations

import json
import shutil

import pytest

from adapters.__main__ import main
from adapters.shelf.gate_rules import (
    DEFAULT_RULES,
    GATE_FILE,
    GateRulesError,
    entry_status,
    read_rules,
    record,
    shelf_warnings,
    write_rules,
)
from adapters.shelf.store import Shelf

VERDICT = {"state": "passed", "reasons": [], "notes": [], "rules": dict(DEFAULT_RULES)}
ABOUT = {"eval_id": "20261125-000000-abcdef", "date": "2026-11-25T10:00:00", "report": "/r"}


@pytest.fixture
def shelf(home, random_lora_dir):
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    return Shelf()


def test_defaults_until_a_gate_json_is_written(shelf):
    folder = shelf.path("tuned")
    assert read_rules(folder) == DEFAULT_RULES and not (folder / GATE_FILE).exists()
    write_rules(folder, {"golden_all_pass": True})
    assert read_rules(folder) == {**DEFAULT_RULES, "golden_all_pass": True}
    assert json.loads((folder / GATE_FILE).read_text())["format"] == "tunedesk-gate/1"


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "gate.json is not valid JSON"),
        ('["a list"]', "does not hold a JSON object"),
        ('{"golden_all_pass": "yes", "typo": 1}', "golden_all_pass must be true or false"),
    ],
)
def test_a_corrupt_gate_json_is_one_sentence(shelf, text, words):
    (shelf.path("tuned") / GATE_FILE).write_text(text)
    with pytest.raises(GateRulesError) as err:
        read_rules(shelf.path("tuned"))
    assert words in str(err.value) and "\n" not in str(err.value)
    status = entry_status(shelf.get("tuned"))
    assert status.state == "not evaluated" and words in status.reasons[0]


def test_not_evaluated_then_passed_then_stale_after_a_change(shelf):
    assert entry_status(shelf.get("tuned")).state == "not evaluated"
    record(shelf, "tuned", VERDICT, ABOUT)
    status = entry_status(shelf.get("tuned"))
    assert (status.state, status.eval_id, status.date) == (
        "passed",
        ABOUT["eval_id"],
        ABOUT["date"],
    )
    assert shelf_warnings(shelf) == []
    # The rules changed after the evaluation: the verdict no longer counts.
    write_rules(shelf.path("tuned"), {"perplexity_not_worse": False})
    status = entry_status(shelf.get("tuned"))
    assert status.state == "not evaluated" and "gate.json changed" in status.reasons[0]
    write_rules(shelf.path("tuned"), dict(DEFAULT_RULES))
    assert entry_status(shelf.get("tuned")).state == "passed"
    # Weights replaced by other weights with a consistent manifest (another training run).
    shelf.write_manifest_fields("tuned", {"adapter_hash": "0" * 16})
    manifest_file = shelf.path("tuned") / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest.pop("adapter_hash")
    manifest_file.write_text(json.dumps(manifest))  # no hash recorded: the file's own sha256
    assert entry_status(shelf.get("tuned")).state == "passed"
    weights = shelf.path("tuned") / "adapter_model.safetensors"
    other = weights.with_name("other.safetensors")
    shutil.copy(weights, other)
    data = bytearray(other.read_bytes())
    data[-1] ^= 1  # a tensor byte, not the header
    weights.write_bytes(bytes(data))
    status = entry_status(shelf.get("tuned"))
    assert status.state == "not evaluated" and "weights changed" in status.reasons[0]
    assert shelf_warnings(shelf)[0].startswith("adapter 'tuned' has not passed its release gate")


def test_cli_shows_edits_and_resets_the_rules(shelf, capsys):
    assert main(["gate", "tuned"]) == 0
    out = capsys.readouterr().out
    assert "defaults: no gate.json yet" in out and "release gate of tuned: not evaluated" in out
    assert (
        main(
            [
                "gate",
                "tuned",
                "--set",
                "slices_not_worse=bleu,rouge_l",
                "--set",
                "golden_not_worse=false",
            ]
        )
        == 0
    )
    assert read_rules(shelf.path("tuned"))["slices_not_worse"] == ["bleu", "rouge_l"]
    assert read_rules(shelf.path("tuned"))["golden_not_worse"] is False
    capsys.readouterr()
    for bad in (
        ["--set", "golden_all_pass=maybe"],
        ["--set", "nope=1"],
        ["--set", "slices_not_worse=bleu,speed"],
    ):
        assert main(["gate", "tuned", *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    (shelf.path("tuned") / GATE_FILE).write_text("{broken")
    assert main(["gate", "tuned"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["gate", "tuned", "--reset"]) == 0
    assert read_rules(shelf.path("tuned")) == DEFAULT_RULES


def test_the_list_command_shows_each_adapters_gate_state(shelf, capsys):
    assert main(["list"]) == 0
    head, row = capsys.readouterr().out.splitlines()[:2]
    assert "release gate" in head and row.split()[0] == "tuned" and " not evaluated " in row
    record(shelf, "tuned", VERDICT, ABOUT)
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gate"] == "passed"
    assert main(["list"]) == 0
    assert " passed " in capsys.readouterr().out.splitlines()[1]


def test_cli_sets_floors_one_by_one_and_shows_the_recorded_figures(shelf, capsys):
    assert (
        main(
            [
                "gate",
                "tuned",
                "--set",
                "floors.right_intent_min=0.9",
                "--set",
                "floors.invented_max=0",
                "--set",
                "handoff_intents=contact_human_agent,complaint",
            ]
        )
        == 0
    )
    rules = read_rules(shelf.path("tuned"))
    assert rules["floors"] == {
        **DEFAULT_RULES["floors"],
        "right_intent_min": 0.9,
        "invented_max": 0,
    }
    assert rules["handoff_intents"] == ["contact_human_agent", "complaint"]
    assert main(["gate", "tuned", "--set", "floors.right_intent_min=2"]) == 2
    assert "floors.right_intent_min must be a share from 0 to 1" in capsys.readouterr().err
    figures = [
        "right-intent rate 0.93 (93/100 rows) reaches the floor 0.90",
        "0 leaked personal data",
    ]
    record(shelf, "tuned", {**VERDICT, "rules": rules, "floors": figures}, ABOUT)
    assert main(["gate", "tuned"]) == 0
    out = capsys.readouterr().out
    assert (
        "release gate of tuned: passed" in out
        and "right-intent rate 0.93 (93/100 rows) reaches the floor 0.90" in out
    )
    assert entry_status(shelf.get("tuned")).floors == figures
