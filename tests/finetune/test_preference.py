"""Preference tuning with TRL on a tiny model: DPO and ORPO start from a shelf adapter, move its
preferences toward the chosen answers, and save a new version that names its parent."""

from __future__ import annotations

import json
import math

import pytest
from safetensors.torch import load_file
from shelf_helpers import put_adapter

from finetune.train.preference import PreferenceConfig, load_policy, read_pairs, train_preference
from finetune.train.preference_accuracy import preference_accuracy

QUESTIONS = [
    "Where is my order?",
    "Can I get a refund?",
    "How do I reset my password?",
    "Is my parcel late?",
    "Cancel my order please",
    "Change my address",
    "Talk to an agent",
    "My card was charged twice",
]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    # About as long as each other; the random starting adapter prefers the rejected one.
    rows = [
        {
            "prompt": [{"role": "user", "content": q}],
            "chosen": "Not my problem: ask someone else.",
            "rejected": "Happy to help: it is sorted now.",
        }
        for q in QUESTIONS
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dpo_moves_the_adapter_toward_the_chosen_answers_and_records_its_lineage(
    home, tiny_llama_dir, pairs_file
):
    parent = put_adapter(tiny_llama_dir, "support", targets=("q_proj", "v_proj", "o_proj"))
    pairs = read_pairs(pairs_file)
    model, tokenizer, _ = load_policy("support", trainable=False)
    before, margin_before, perplexity = preference_accuracy(model, tokenizer, pairs)
    assert (
        1.0 < perplexity < 2 * len(tokenizer)
    )  # a near-uniform tiny model: about its vocabulary's size
    logs = []
    result = train_preference(
        PreferenceConfig(
            "support",
            str(pairs_file),
            name="support-dpo",
            max_steps=30,
            learning_rate=5e-2,
            batch_size=4,
            beta=0.1,
        ),
        on_log=lambda step, total, values: logs.append((step, total, values)),
    )
    assert result.steps == 30 and result.pairs == 8 and logs[-1][1] == 30
    after_model, _, manifest = load_policy("support-dpo", trainable=False)
    after, margin_after, _ = preference_accuracy(after_model, tokenizer, pairs)
    print(f"accuracy {before:.2f} -> {after:.2f}, margin {margin_before:.2f} -> {margin_after:.2f}")
    # measured: margin -42.1 -> -28.8 (the near-uniform tiny model needs length-sized moves)
    assert after >= before and margin_after > margin_before + 5
    assert manifest["lineage"] == {
        "parent": "support",
        "parent_hash": parent.adapter_hash,
        "method": "dpo",
        "pairs": 8,
        "pairs_file": str(pairs_file),
        "pairs_hash": manifest["lineage"]["pairs_hash"],
    }
    assert manifest["adapter_hash"] != parent.adapter_hash
    assert manifest["base_model"] == parent.manifest["base_model"]
    assert not (
        home / "adapters" / "support-dpo" / "ref"
    ).exists()  # TRL's reference copy is not saved
    from inference.session import ModelSession

    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    session.check_usable("support-dpo")  # served like any adapter


def test_cpo_scores_the_answers_own_log_probabilities_and_moves_the_margin(
    home, tiny_llama_dir, pairs_file
):
    put_adapter(tiny_llama_dir, "support", targets=("q_proj", "v_proj", "o_proj"))
    pairs = read_pairs(pairs_file)
    model, tokenizer, _ = load_policy("support", trainable=False)
    _, margin_before, _ = preference_accuracy(model, tokenizer, pairs)
    logs = []
    result = train_preference(
        PreferenceConfig(
            "support",
            str(pairs_file),
            method="cpo",
            max_steps=30,
            learning_rate=5e-2,
            batch_size=4,
            beta=0.1,
        ),
        on_log=lambda step, total, values: logs.append(values),
    )
    first = logs[
        0
    ]  # no reference: the rewards are beta x the policy's own summed log-probabilities
    assert first["logps/chosen"] < -10 and first["logps/rejected"] < -10
    assert first["rewards/chosen"] == pytest.approx(0.1 * first["logps/chosen"], rel=1e-4)
    assert first["rewards/rejected"] == pytest.approx(0.1 * first["logps/rejected"], rel=1e-4)
    after_model, _, manifest = load_policy("support-cpo", trainable=False)
    _, margin_after, _ = preference_accuracy(after_model, tokenizer, pairs)
    assert result.steps == 30 and manifest["lineage"]["method"] == "cpo"
    assert margin_after > margin_before + 5
    assert not (home / "adapters" / "support-cpo" / "ref").exists()


def test_orpo_needs_no_reference_and_saves_a_version(home, tiny_llama_dir, pairs_file):
    put_adapter(tiny_llama_dir, "support")
    result = train_preference(
        PreferenceConfig("support", str(pairs_file), method="orpo", max_steps=2)
    )
    assert result.name == "support-orpo" and result.steps == 2
    assert json.loads((result.path / "manifest.json").read_text())["lineage"]["method"] == "orpo"


def test_preference_runs_in_bf16_on_the_cpu_and_refuses_fp16_there(
    home, tiny_llama_dir, pairs_file
):
    put_adapter(tiny_llama_dir, "support")
    events = []
    result = train_preference(
        PreferenceConfig(
            "support",
            str(pairs_file),
            name="support-bf16",
            max_steps=2,
            batch_size=4,
            precision="bf16",
        ),
        on_event=events.append,
    )
    preference = json.loads((result.path / "manifest.json").read_text())["preference"]
    assert result.steps == 2 and preference["precision"] == "bf16" and preference["device"] == "cpu"
    assert all(math.isfinite(e["loss"]) for e in events if e["type"] == "progress")
    with pytest.raises(ValueError, match="fp16 needs a CUDA GPU"):
        train_preference(
            PreferenceConfig("support", str(pairs_file), name="support-fp16", precision="fp16")
        )
    assert not (home / "adapters" / "support-fp16").exists()


def test_bad_settings_pairs_and_names_are_refused_before_training(
    home, tiny_llama_dir, pairs_file, tmp_path
):
    put_adapter(tiny_llama_dir, "support")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "hi", "chosen": "a", "rejected": ""}) + "\n")
    cases = [
        (
            PreferenceConfig("support", str(pairs_file), method="ppo"),
            "method must be one of dpo, cpo, orpo",
        ),
        (PreferenceConfig("support", str(pairs_file), beta=0), "beta must be above"),
        (
            PreferenceConfig("support", str(pairs_file), loss="kto"),
            "loss must be one of sigmoid, apo_zero, ipo",
        ),
        (PreferenceConfig("missing", str(pairs_file)), "no adapter named"),
        (PreferenceConfig("support", str(bad)), "bad.jsonl line 1: a pair needs"),
        (PreferenceConfig("support", str(tmp_path / "none.jsonl")), "cannot read pairs"),
        (PreferenceConfig("support", str(pairs_file), name="support"), "already on the shelf"),
    ]
    for cfg, words in cases:
        with pytest.raises(ValueError, match=words):
            train_preference(cfg)
    assert sorted(p.name for p in (home / "adapters").iterdir()) == ["support"]


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--max-steps", "-1"], "max steps must be a whole number between 0 and"),
        (["--lr", "5"], "learning rate must be a number between"),
        (["--max-samples", "-5"], "max samples must be a whole number between"),
        (["--with-passages", "1"], "training with passages is for sft"),
        (["--name", "../x"], "invalid adapter name '../x'"),
    ],
)
def test_the_cli_refuses_what_a_supervised_run_refuses_before_a_preference_run(
    home, tiny_llama_dir, pairs_file, capsys, flags, said
):
    """A preference run skipped the run settings' checks: each of these trained and saved an
    adapter (--max-steps -1 as 'use the epochs', a learning rate of 5, passages it ignores)."""
    from finetune.__main__ import main

    put_adapter(tiny_llama_dir, "support")
    argv = ["train", "--method", "dpo", "--from-adapter", "support", "--data", str(pairs_file)]
    assert main([*argv, "--batch-size", "2", "--quiet", *flags]) == 2
    assert said in capsys.readouterr().err
    assert sorted(p.name for p in (home / "adapters").iterdir()) == ["support"]


def test_the_cli_trains_dpo_from_a_shelf_adapter(home, tiny_llama_dir, pairs_file, capsys):
    from finetune.__main__ import main

    put_adapter(tiny_llama_dir, "support")
    assert (
        main(["train", "--method", "dpo", "--data", str(pairs_file), "--max-steps", "2", "--quiet"])
        == 2
    )
    assert "--from-adapter" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--method",
                "dpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--max-steps",
                "2",
                "--batch-size",
                "2",
                "--name",
                "cli-dpo",
                "--quiet",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert (report["method"], report["from"], report["steps"], report["pairs"]) == (
        "dpo",
        "support",
        2,
        8,
    )
    assert (home / "adapters" / "cli-dpo" / "adapter_model.safetensors").is_file()
    assert (
        main(
            [
                "train",
                "--method",
                "cpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--max-steps",
                "1",
                "--batch-size",
                "2",
                "--sft-weight",
                "2",
                "--name",
                "cli-cpo",
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["method"] == "cpo"
    manifest = json.loads((home / "adapters" / "cli-cpo" / "manifest.json").read_text())
    assert manifest["lineage"]["method"] == "cpo"
    pref = manifest["preference"]
    # CPO's beta, learning rate and epochs (not SFT's 1e-3 and 1), the SFT weight given
    assert (pref["beta"], pref["sft_weight"], pref["learning_rate"], pref["epochs"]) == (
        0.05,
        2.0,
        1e-3,
        1.5,
    )
    assert (
        main(
            [
                "train",
                "--method",
                "cpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--lr",
                "3e-4",
                "--epochs",
                "0.5",
                "--name",
                "cli-cpo-set",
                "--quiet",
            ]
        )
        == 0
    )
    pref = json.loads((home / "adapters" / "cli-cpo-set" / "manifest.json").read_text())[
        "preference"
    ]
    assert (
        pref["learning_rate"],
        pref["epochs"],
        json.loads(capsys.readouterr().out)["steps"],
    ) == (3e-4, 0.5, 1)
    assert pref["batch_size"] == 4  # the method's measured batch, not supervised training's 8


def test_the_cli_shows_a_preference_runs_progress_in_the_terminal(
    home, tiny_llama_dir, pairs_file, capsys
):
    """Without --quiet (as a newcomer runs it): the start line names the method, the pairs and
    the adapter's trainable parameters (the start event once lacked them, and the CLI crashed)."""
    from finetune.__main__ import main

    put_adapter(tiny_llama_dir, "support", targets=("q_proj", "v_proj"))
    assert (
        main(
            [
                "train",
                "--method",
                "dpo",
                "--from-adapter",
                "support",
                "--data",
                str(pairs_file),
                "--max-steps",
                "1",
                "--batch-size",
                "4",
                "--name",
                "shown",
            ]
        )
        == 0
    )
    shown = capsys.readouterr()
    printed = shown.out + shown.err
    assert "scoring the 8 pairs under support once (DPO's reference)" in printed
    assert "training dpo on 8 pairs on cpu" in printed and "targets q_proj, v_proj" in printed
    trainable = sum(
        t.numel()
        for t in load_file(home / "adapters" / "shown" / "adapter_model.safetensors").values()
    )
    assert f"{trainable:,} trainable parameters" in printed


def test_each_method_starts_from_its_measured_settings():
    def settings(cfg):
        return cfg.beta, cfg.sft_weight, cfg.learning_rate, cfg.epochs, cfg.batch_size

    assert {
        m: settings(PreferenceConfig("a", "p.jsonl", method=m)) for m in ("dpo", "cpo", "orpo")
    } == {
        "dpo": (0.05, 6.0, 1e-3, 1.5, 4),
        "cpo": (0.05, 6.0, 1e-3, 1.5, 4),
        "orpo": (0.02, 0.0, 5e-4, 1.0, 4),
    }
    chosen = PreferenceConfig(
        "a",
        "p.jsonl",
        method="cpo",
        beta=0.1,
        sft_weight=0.0,
        learning_rate=1e-5,
        epochs=3,
        batch_size=2,
    )
    assert settings(chosen) == (
        0.1,
        0.0,
        1e-5,
        3,
        2,
    )  # a setting the run makes is kept, zero included


def test_progress_events_and_a_stop_save_the_step_reached(home, tiny_llama_dir, pairs_file):
    put_adapter(tiny_llama_dir, "support")
    events = []
    result = train_preference(
        PreferenceConfig("support", str(pairs_file), name="stopped", max_steps=5, batch_size=2),
        on_event=events.append,
        stop=lambda: True,
    )
    assert (result.status, result.steps) == ("stopped", 1)
    kinds = [e["type"] for e in events]
    before = kinds[
        : kinds.index("start")
    ]  # loading, then DPO's reference pass (cut short by the stop)
    assert before == ["status", "status"] and "DPO's reference" in events[1]["message"]
    assert kinds[-2:] == ["saved", "done"] and "progress" in kinds
    progress = next(e for e in events if e["type"] == "progress")
    assert progress["total_steps"] == 5 and progress["step"] == 1 and progress["loss"] > 0
    assert json.loads((result.path / "manifest.json").read_text())["status"] == "stopped"


def test_the_runner_trains_dpo_in_a_child_with_the_progress_the_train_tab_reads(
    home, tiny_llama_dir, pairs_file
):
    import time

    from core.events import read_events
    from finetune.config import RunConfig
    from finetune.train import runner

    put_adapter(tiny_llama_dir, "support")
    cfg = RunConfig()
    cfg.model.name, cfg.data.path = str(tiny_llama_dir), str(pairs_file)
    cfg.train.method, cfg.train.from_adapter, cfg.train.max_steps, cfg.train.batch_size = (
        "dpo",
        "support",
        2,
        4,
    )
    cfg.train.learning_rate = 1e-4
    cfg.run.adapter_name = "via-runner"
    info = runner.start(cfg)
    deadline = time.time() + 240
    while runner.get(info.run_id).state in runner.ACTIVE and time.time() < deadline:
        time.sleep(0.5)
    done = runner.get(info.run_id)
    assert done.state == "done", runner.log_tail(done.run_dir)
    events, _ = read_events(done.run_dir / "events.jsonl")
    assert [e["step"] for e in events if e["type"] == "progress"] == [1, 2]
    manifest = json.loads((home / "adapters" / "via-runner" / "manifest.json").read_text())
    assert (
        manifest["lineage"]["parent"] == "support"
        and manifest["preference"]["learning_rate"] == 1e-4
    )


def test_the_adapters_tab_shows_the_lineage(home, tiny_llama_dir, pairs_file):
    from adapters.shelf.store import Shelf
    from ui.views.shelf import details_markdown

    parent = put_adapter(tiny_llama_dir, "support")
    train_preference(
        PreferenceConfig("support", str(pairs_file), name="support-v2", max_steps=1, batch_size=2)
    )
    text = details_markdown(Shelf().get("support-v2"))
    assert (
        f"**Lineage:** support (`{parent.adapter_hash[:12]}`) + 8 preference pairs by DPO" in text
    )
