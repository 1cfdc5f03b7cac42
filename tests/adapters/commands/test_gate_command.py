"""`python -m adapters gate NAME --set ...`: a rule set a way it cannot be is one sentence."""

from __future__ import annotations

import pytest

from adapters.__main__ import main
from adapters.export import import_adapter


@pytest.mark.parametrize(
    "setting, said",
    [
        # was "dictionary update sequence element #0 has length 1; 2 is required"
        ("floors=0.9", "set one floor at a time: floors.NAME=NUMBER|none"),
        ("floors.right_intent_min", "expected RULE=VALUE"),
        ("judge=0.7", "the judge's rules are edited in gate.json's 'judge' object"),
    ],
)
def test_a_whole_object_rule_is_refused_in_a_sentence(home, random_lora_dir, capsys, setting, said):
    folder = import_adapter(random_lora_dir, name="support").path
    assert main(["gate", "support", "--set", "floors.intent_min=0.6"]) == 0
    before = (folder / "gate.json").read_bytes()
    capsys.readouterr()
    assert main(["gate", "support", "--set", setting]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert (folder / "gate.json").read_bytes() == before
