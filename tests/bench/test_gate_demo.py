"""The gate demo, small enough for CI: on the default model and a toy support set (four kinds
of request, 120 training rows, 14 steps at lr 3e-3), an adapter trained on the real answers passes
its default release gate and one trained on shuffled answers fails it. The tiny llama model from a
config does not learn this in CI time (its loss fell from 6.07 to 5.78 in 40 steps at lr 5e-2),
hence the default model. Its golden prompts ask for each answer's keyword and the gate asks for all
of them (golden_all_pass, beside the default rules): with the defaults alone the damaged adapter
failed on one slice only (payment_issue, BLEU -0.19), too thin a margin for another CPU. 14 steps at
3e-3 (the good adapter's validation loss 0.007) took 67 s alone where 20 at 2e-3 took 85 (2-core
EPYC with avx512_bf16, fp32 as here); 10 at 2e-3 left the good adapter failing cancel_order. The
full demo (`python -m bench gate-demo`, Bitext) is in docs/benchmarks.md."""

from __future__ import annotations

import json
import random

import pytest

from bench.gate_demo import DemoArgs, run_demo

# Four kinds of request, each answered with its own sentence that starts with its keyword.
INTENTS = {
    "cancel_order": ("please stop order {i}", "Cancel done: your order is off."),
    "newsletter": ("no more emails for {i}", "Newsletter: you are unsubscribed."),
    "payment_issue": ("my card fails at checkout {i}", "Payment: try your card again."),
    "change_address": ("ship order {i} to my new street", "Address: the new street is saved."),
}
KEYWORD = {
    "cancel_order": "cancel",
    "newsletter": "newsletter",
    "payment_issue": "payment",
    "change_address": "address",
}


def write_toy(folder):
    rows = [
        {"prompt": p.format(i=i), "response": r, "intent": intent}
        for i in range(40)
        for intent, (p, r) in INTENTS.items()
    ]
    random.Random(0).shuffle(rows)
    data = folder / "toy.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    golden = folder / "golden.jsonl"
    golden.write_text(
        "".join(
            json.dumps(
                {
                    "id": intent,
                    "intent": intent,
                    "prompt": p.format(i=99),
                    "must_contain": [KEYWORD[intent]],
                    "must_not_contain": [],
                }
            )
            + "\n"
            for intent, (p, _) in INTENTS.items()
        )
    )
    return data, golden


@pytest.fixture(scope="module")
def demo(default_model_dir, tmp_path_factory):
    import torch

    folder = tmp_path_factory.mktemp("gate-demo")
    data, golden = write_toy(folder)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEDESK_HOME", str(folder / "home"))
        args = DemoArgs(
            data=str(data),
            model=str(default_model_dir.path),
            train_rows=120,
            steps=14,
            batch_size=8,
            learning_rate=3e-3,
            lora_r=8,
            max_length=64,
            rows_per_slice=5,
            max_new_tokens=8,
            golden=str(golden),
            rules="golden_all_pass=true",
        )
        result = run_demo(args, on_line=lambda line: None)
    torch.set_num_threads(threads)
    return result


@pytest.mark.slow
def test_good_adapter_passes_and_damaged_one_fails(demo):
    good, damaged = demo["gate"]["gate-demo-good"], demo["gate"]["gate-demo-damaged"]
    assert demo["shuffled_rows"] > 80  # most of the 120 training answers moved
    assert good["state"] == "passed", good["reasons"]
    assert damaged["state"] == "failed" and damaged["reasons"]
    assert demo["ok"] and demo["slices"] == 4 and demo["rows"] == 20
    assert any(r.startswith("golden prompts: ") for r in damaged["reasons"]), damaged["reasons"]


def test_bad_rules_are_refused_before_any_training(tmp_path, monkeypatch):
    from adapters.shelf.gate_rules import GateRulesError

    monkeypatch.setenv("TUNEDESK_HOME", str(tmp_path))
    with pytest.raises(GateRulesError, match="golden_all_pass must be true or false"):
        run_demo(DemoArgs(data=str(tmp_path / "none.jsonl"), rules="golden_all_pass=maybe"))


@pytest.mark.slow
def test_the_verdicts_are_recorded_with_the_adapters(demo):
    from pathlib import Path

    home = Path(demo["report"]).parents[1]
    for name, verdict in demo["gate"].items():
        manifest = json.loads((home / "adapters" / name / "manifest.json").read_text())
        assert manifest["gate"]["state"] == verdict["state"]
        assert manifest["gate"]["eval_id"] == demo["eval_id"]
        assert manifest["gate"]["rules"]["golden_all_pass"] is True
