"""eval/grounded.py through evaluate(): the rows answered again with the knowledge shelf's
passages, both rows scored per model and per intent, and no evaluation row ever shown: the
test plants every held-out row's own question and answer on the shelf and proves none is."""

from __future__ import annotations

import json
import shutil

import pytest

from adapters.shelf.store import Shelf
from core import models
from eval.__main__ import main
from eval.grounded import COLUMNS, lines, table
from eval.run import evaluate
from finetune.config import DataArgs
from finetune.data import prepare
from finetune.data.format import ChatFormat
from inference.generate import GenerationSettings
from inference.session import ModelSession
from knowledge.grounding import DEFAULT_K, ground
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from knowledge.training import shelve_pairs

TRAIN_ARGS = {"max_length": 128, "val_fraction": 0.25, "seed": 42}


def rows(n=24):
    return [
        {
            "prompt": f"where is my order {i}, I want it tracked",
            "intent": ("track", "refund")[i % 2],
            "response": f"Order {i} left the depot; its tracking code is TRK{i:04d}.",
        }
        for i in range(n)
    ]


@pytest.fixture
def setup(home, tiny_llama_dir, random_lora_dir):
    """Adapter ``a`` trained (as its manifest says) on the train split, grounded in a knowledge
    version holding that split AND, planted, every held-out row's own question and answer."""
    from transformers import AutoTokenizer

    data = home.parent / "support.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    prepared = prepare(DataArgs(path=str(data), **TRAIN_ARGS), tokenizer)
    train = prepared.rows_raw["train"].to_dict()
    held = [r for r in rows() if r["prompt"] not in set(train["prompt"])]
    assert held
    shelve_pairs(
        train["prompt"],
        train["response"],
        dataset_fingerprint=prepared.fingerprint,
        data_path=str(data),
    )
    planted, _ = KnowledgeShelf().add(
        "answers-support",
        [Passage(r["prompt"], r["response"], "planted", "past_answer", r["prompt"]) for r in held],
        ["planted"],
    )
    Shelf()
    shutil.copytree(random_lora_dir, home / "adapters" / "a")
    resolved = models.resolve(str(tiny_llama_dir))
    (home / "adapters" / "a" / "manifest.json").write_text(
        json.dumps(
            {
                "format": "tunedesk-adapter/1",
                "name": "a",
                "lora": {"r": 4},
                "base_model": {"name": str(tiny_llama_dir), "weight_hash": resolved.weight_hash},
                "data": {
                    "path": str(data),
                    "fingerprint": prepared.fingerprint,
                    **TRAIN_ARGS,
                    "train_rows": prepared.train.num_rows,
                    "val_rows": prepared.val.num_rows,
                    "system_prompt": None,
                },
                "knowledge": {
                    "name": "answers-support",
                    "version": planted.version,
                    "split": "train",
                },
            }
        )
    )
    return {"data": data, "held": held, "version": planted.version}


def test_both_rows_per_model_and_intent_and_no_evaluation_row_is_shown(setup, tiny_llama_dir):
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    report = evaluate(
        session,
        ["a"],
        str(setup["data"]),
        max_samples=4,
        batch_size=4,
        settings=GenerationSettings(max_new_tokens=6),
        golden=None,
        save=False,
    )
    part = report.grounding  # default: both, since the adapter names its knowledge
    label = f"answers-support {setup['version']}"
    assert part["mode"] == "both" and part["knowledge"] == {"base": label, "a": label}
    assert [(r["model"], r["grounding"], r["rows"]) for r in part["rows"]] == [
        ("base", "off", 4),
        ("base", label, 4),
        ("a", "off", 4),
        ("a", label, 4),
    ]
    assert set(part["per_intent"]) == {"track", "refund"}
    assert (
        sum(r["rows"] for r in part["per_intent"]["track"])
        + sum(r["rows"] for r in part["per_intent"]["refund"])
        == 4 * 4
    )
    ungrounded = next(r for r in part["rows"] if r["model"] == "a" and r["grounding"] == "off")
    assert ungrounded["bleu"] == pytest.approx(report.metrics["a"]["bleu"])
    # the gate's floors read the grounded answers: what an alias on auto serves
    grounded = next(r for r in part["rows"] if r["model"] == "a" and r["grounding"] == label)
    verdict = report.gate["a"]
    assert verdict["grounding"] == label
    said = "; ".join(verdict["reasons"] + verdict["floors"])
    assert f"right-intent rate {grounded['right_intent']:.2f} (" in said
    assert f"(without it: right-intent rate {ungrounded['right_intent']:.2f})" in "; ".join(
        verdict["notes"]
    )
    assert len(table(part)) == 4 and len(table(part)[0]) == len(COLUMNS)

    version = KnowledgeShelf().get("answers-support", setup["version"])
    by_id = dict(version.passages_page())
    held = {(r["prompt"], r["response"]) for r in setup["held"]}
    held_answers = {a for _, a in held}
    shown = part["shown"][label]["passage_ids"]
    assert any(shown)  # grounded: the training split's answers were shown
    assert part["k"] == DEFAULT_K and max(len(ids) for ids in shown) == DEFAULT_K  # as Chat shows
    for sample, ids in zip(report.samples, shown, strict=True):
        assert sample["grounded"]["passages"][label] == ids
        assert sample["grounded"]["answers"]["a"] is not None
        for pid in ids:  # never an evaluation-split row, the evaluated one least of all
            assert by_id[pid].text not in held_answers and by_id[pid].source != "planted"
    assert part["shown"][label]["excluded"] > 0  # the planted rows were found, and kept out
    # Without the guard the planted rows are what search shows first: the guard is what hides them.
    fmt = ChatFormat(session.tokenizer, None)
    unguarded, _ = ground(
        fmt.messages(report.samples[0]["prompt"]), "answers-support", setup["version"]
    )
    assert report.samples[0]["reference"] in unguarded[0]["content"]
    # the Evaluate tab's table: every row overall, then per intent
    from ui.views.evaluation import grounding_rows

    cols, shown_rows = grounding_rows(report)
    assert cols == ["intent", *COLUMNS] and len(shown_rows) == 4 + 2 * 4
    assert [r[:3] for r in shown_rows[:2]] == [["(all)", "base", "off"], ["(all)", "base", label]]
    assert {r[0] for r in shown_rows[4:]} == {"refund", "track"}


def _two_rows(session, setup, **options):
    """Two rows answered 2 tokens long, not saved."""
    return evaluate(
        session,
        ["a"],
        str(setup["data"]),
        max_samples=2,
        batch_size=2,
        settings=GenerationSettings(max_new_tokens=2),
        golden=None,
        save=False,
        **options,
    )


def test_off_leaves_no_section_and_a_bad_mode_is_one_sentence(setup, tiny_llama_dir, capsys):
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    report = _two_rows(session, setup, grounding="off")
    assert report.grounding == {} and "grounded" not in report.samples[0]
    more = _two_rows(session, setup, grounding="on", passages=DEFAULT_K + 1)  # past the default
    shown = next(iter(more.grounding["shown"].values()))["passage_ids"]
    assert more.grounding["k"] == DEFAULT_K + 1 and max(len(ids) for ids in shown) == DEFAULT_K + 1
    assert f"passages shown at most per answer: {DEFAULT_K + 1}" in lines(more.grounding)
    with pytest.raises(ValueError, match="passages per grounded answer must be from 1 to 5"):
        evaluate(session, ["a"], str(setup["data"]), passages=0, save=False)
    with pytest.raises(ValueError, match="grounding must be one of off, on, both"):
        evaluate(session, ["a"], str(setup["data"]), grounding="always", save=False)
    with pytest.raises(SystemExit):
        main(["--adapter", "a", "--data", str(setup["data"]), "--grounding", "always"])
    assert "invalid choice: 'always'" in capsys.readouterr().err


def test_the_command_line_prints_both_rows(setup, capsys):
    code = main(
        [
            "--adapter",
            "a",
            "--data",
            str(setup["data"]),
            "--max-samples",
            "2",
            "--max-new-tokens",
            "2",
            "--no-golden",
            "--quiet",
            "--grounding",
            "on",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "with and without grounding" in out
    assert f"| a | answers-support {setup['version']} | 2 |" in out
    assert "| a | off |" not in out  # on: the grounded rows only
    assert "passages kept out because they are evaluation rows:" in out


def test_the_guard_keeps_out_evaluation_rows_but_not_a_training_rows_canned_answer(tmp_path):
    from eval.grounded import leak_guard

    canned = "Choose Forgot password on the sign-in page."
    table = [
        {"prompt": "I forgot my password", "response": canned},  # trained
        {"prompt": "cannot sign in, password lost", "response": canned},  # held out, evaluated
        {"prompt": "where is my parcel", "response": "It left the depot today."},  # held out
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in table))
    excluded = leak_guard(
        [table[1]["prompt"]], [canned], str(data), None, {(table[0]["prompt"], canned)}
    )
    training_row = Passage(
        table[0]["prompt"], canned, "f:train row 1", "past_answer", "I forgot my password"
    )
    assert not excluded(training_row)  # the team's answer to another customer: shown as served
    assert excluded(Passage("x", canned, "p", "past_answer", table[1]["prompt"]))  # the row itself
    assert excluded(
        Passage("x", "other words", "p", "past_answer", "Cannot sign in, password lost")
    )
    assert excluded(Passage("Sign-in help", canned, "kb.md#help"))  # its answer, not a training row
    assert excluded(Passage("x", "It left the depot today.", "p", "past_answer", "parcel?"))
    assert not excluded(Passage("Shipping", "Parcels take two days.", "kb.md#ship"))
    everything = leak_guard([table[1]["prompt"]], [canned], str(data), None, None)
    assert everything(training_row)  # the split unknown: every row of the file is kept out


def test_a_chosen_knowledge_base_grounds_every_model_and_the_gate_judges_it_so(
    setup, tiny_llama_dir, capsys
):
    """The team's help-center articles, not the past answers the adapter was trained beside:
    every model is grounded in them, and the gate records them as what it judged."""
    shelf = KnowledgeShelf()
    article = Passage("Tracking", "Every order ships with a tracking code by e-mail.", "kb.md#t")
    first, _ = shelf.add("articles", [article], ["kb.md"])
    newer = Passage("Refunds", "Refunds reach your card within five days.", "refunds.md#r")
    second, _ = shelf.add("articles", [newer], ["refunds.md"])
    assert (first.version, second.version) == ("v1", "v2")
    session = ModelSession(str(tiny_llama_dir), dtype="float32")
    report = _two_rows(session, setup, knowledge="articles")  # the newest version
    part = report.grounding
    assert part["mode"] == "both" and part["chosen"] == "articles v2"
    assert part["knowledge"] == {"base": "articles v2", "a": "articles v2"}
    texts = {p.text for _, p in shelf.get("articles", "v2").passages_page()}
    for sample in report.samples:
        ids = sample["grounded"]["passages"]["articles v2"]
        assert ids and all(
            dict(shelf.get("articles", "v2").passages_page())[i].text in texts for i in ids
        )
    verdict = report.gate["a"]
    assert verdict["grounding"] == "articles v2"  # what an alias grounded in articles may serve
    notes = " ".join(verdict["notes"])
    assert "as an alias grounded in articles serves this adapter" in notes
    assert "every model grounded in articles v2 (chosen" in "\n".join(lines(part))
    # checked as serving checks: against the articles the answers were grounded in (no labels)
    checked = report.checked["models"]["a"]
    assert checked["served"] == "articles v2" and checked["outcomes"]["skipped"] == 2
    assert "articles v2" in checked["outcomes"]["knowledge"]

    older = _two_rows(session, setup, knowledge="articles@v1", grounding="on")
    assert older.grounding["knowledge"]["a"] == "articles v1"
    with pytest.raises(ValueError, match="no knowledge base named 'faq'"):
        _two_rows(session, setup, knowledge="faq")
    with pytest.raises(ValueError, match=r"articles has no version 'v9' \(versions: v1, v2\)"):
        _two_rows(session, setup, knowledge="articles@v9")
    with pytest.raises(ValueError, match="grounding off answers without knowledge"):
        _two_rows(session, setup, knowledge="articles", grounding="off")
    code = main(["--adapter", "a", "--data", str(setup["data"]), "--knowledge", "faq"])
    assert code == 2 and "no knowledge base named 'faq'" in capsys.readouterr().err
