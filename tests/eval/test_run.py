"""The paired evaluation on the tiny llama model with two real (random, seeded) LoRA adapters."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

from adapters.shelf.store import Shelf
from core import models
from eval.__main__ import main
from eval.perplexity import perplexity
from eval.run import evaluate
from eval.scoring_rows import select_rows
from finetune.config import DataArgs
from finetune.data import prepare
from inference.generate import GenerationSettings, generate_batch
from inference.session import ModelSession

ADAPTERS = ["tuned-a", "tuned-b"]
N_ROWS, BATCH, NEW_TOKENS = 10, 4, 6
# Trained on 16 of 24 rows (4 validation, 12 train): 12 held-out rows, 10 of them scored.
TRAIN_ARGS = {"max_length": 128, "val_fraction": 0.25, "seed": 42, "max_samples": 16}
GOLDEN = [
    {
        "id": "g1",
        "prompt": "where is my order?",
        "must_contain": [],
        "must_not_contain": ["as an ai language model"],
    },
    {
        "id": "g2",
        "prompt": "cancel it please",
        "must_contain": ["zzqx-never-said"],
        "must_not_contain": [],
    },
    {"id": "g3", "prompt": "refund?", "must_contain": [], "must_not_contain": []},
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: a tiny model's matmuls only lose time waiting for a second one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_dataset(folder: Path) -> Path:
    path = folder / "support.jsonl"
    rows = [
        {
            "prompt": f"question {i}: where is my order {i}?",
            "response": f"Your order {i} ships soon; track it in your account.",
            "intent": "track_order" if i % 2 else "refund",
        }
        for i in range(24)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def assets(tiny_llama_dir, tmp_path_factory) -> dict:
    """Dataset, golden file and two saved adapters with manifests (copied into each home)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("eval-assets")
    data = write_dataset(root)
    golden = root / "golden.jsonl"
    golden.write_text("".join(json.dumps(g) + "\n" for g in GOLDEN))
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    train_args = DataArgs(path=str(data), **TRAIN_ARGS)
    prepared = prepare(train_args, tokenizer)
    resolved = models.resolve(str(tiny_llama_dir))
    folders = {}
    for seed, name in enumerate(ADAPTERS):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
        config = LoraConfig(
            r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        )
        folder = root / "shelf" / name
        get_peft_model(base, config).save_pretrained(folder)
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "lora": {"r": 4},
            "base_model": {"name": str(tiny_llama_dir), "weight_hash": resolved.weight_hash},
            "data": {
                "path": str(data),
                "fingerprint": prepared.fingerprint,
                "train_rows": prepared.train.num_rows,
                "val_rows": prepared.val.num_rows,
                "max_length": 128,
                "system_prompt": None,
                "seed": 42,
                "val_fraction": 0.25,
            },
        }
        (folder / "manifest.json").write_text(json.dumps(manifest))
        folders[name] = folder
    train_prompts = set(prepared.rows_raw["train"].to_dict()["prompt"])
    return {"data": data, "golden": golden, "folders": folders, "train_prompts": train_prompts}


def install(assets: dict, home: Path) -> None:
    for name, folder in assets["folders"].items():
        shutil.copytree(folder, home / "adapters" / name)


@pytest.fixture(scope="module")
def run(assets, tiny_llama_dir, tmp_path_factory) -> dict:
    """One evaluation, shared by the tests below; counts the model's generate calls."""
    home = tmp_path_factory.mktemp("eval-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEDESK_HOME", str(home))
        Shelf()  # creates the home folders
        install(assets, home)
        session = ModelSession(str(tiny_llama_dir), dtype="float32")
        for name in ADAPTERS:
            session.load_adapter(name)
        calls = []
        original = session.model.generate

        def counting(*args, **kwargs):
            calls.append(kwargs["input_ids"].shape[0])
            return original(*args, **kwargs)

        session.model.generate = counting  # an instance attribute shadows the method
        progress = []
        settings = GenerationSettings(max_new_tokens=NEW_TOKENS)
        report = evaluate(
            session,
            ADAPTERS,
            str(assets["data"]),
            max_samples=N_ROWS,
            batch_size=BATCH,
            settings=settings,
            golden=str(assets["golden"]),
            on_progress=lambda f, m: progress.append((f, m)),
        )
        del session.model.generate  # stop counting; the session serves the checks below
        manifests = {name: Shelf().get(name).manifest for name in ADAPTERS}
        yield {
            "report": report,
            "session": session,
            "calls": calls,
            "progress": progress,
            "settings": settings,
            "manifests": manifests,
            "home": home,
        }


def test_report_has_base_and_both_adapters_with_all_metrics(run):
    report = run["report"]
    assert report.models == ["base", *ADAPTERS]
    for m in report.models:
        x = report.metrics[m]
        assert 0 <= x["bleu"] <= 100 and 0 <= x["rouge_l"] <= 1
        assert x["perplexity"] > 1 and x["tokens"] > 0
        # g2 needs a phrase nobody says; g1 and g3 pass for random answers.
        assert (x["golden_passed"], x["golden_total"]) == (2, 3)
    assert len(report.samples) == N_ROWS
    for a in ADAPTERS:
        for metric in ("bleu", "rouge_l", "perplexity"):
            d = report.deltas[a][metric]
            assert d["delta"] == pytest.approx(
                report.metrics[a][metric] - report.metrics["base"][metric]
            )
            assert d["low"] <= d["delta"] <= d["high"] or math.isclose(d["low"], d["high"])
    assert report.metrics["tuned-a"]["perplexity"] != report.metrics["base"]["perplexity"]
    assert run["progress"][0][0] == 0.0 and run["progress"][-1][0] == 1.0
    assert [f for f, _ in run["progress"]] == sorted(f for f, _ in run["progress"])


def test_scores_held_out_rows_only(run, assets):
    report = run["report"]
    # The manifest leaves max_samples out (as train.py does); the fingerprint confirms the guess.
    assert report.data["held_out"], report.data["selection"]
    assert report.data["rows"] == N_ROWS and "beyond its max_samples=16" in report.data["selection"]
    assert not {s["prompt"] for s in report.samples} & assets["train_prompts"]


def test_per_sample_table_and_worse_list(run):
    report = run["report"]
    for s in report.samples:
        for a in ADAPTERS:
            assert s["delta"][a]["rouge_l"] == pytest.approx(s["rouge_l"][a] - s["rouge_l"]["base"])
            assert s["delta"][a]["bleu"] == pytest.approx(s["bleu"][a] - s["bleu"]["base"])
    for a in ADAPTERS:
        ordered = [s["delta"][a]["rouge_l"] for s in report.sorted_samples(a)]
        assert ordered == sorted(ordered)
        assert report.worse[a] == [
            s["index"] for s in report.sorted_samples(a) if s["delta"][a]["rouge_l"] < 0
        ]


def test_answers_equal_answers_generated_alone(run):
    session, report = run["session"], run["report"]
    for s in report.samples[:4]:
        messages = [{"role": "user", "content": s["prompt"]}]
        for label, name in (("base", None), ("tuned-b", "tuned-b")):
            alone = generate_batch(session, [messages], [name], run["settings"])[0]
            assert s["answers"][label] == alone.text


def test_generation_is_batched_not_per_row(run):
    # One call per batch of prompts, each answered by all 3 models in that call.
    calls, models = run["calls"], len(ADAPTERS) + 1
    expected = math.ceil(N_ROWS / BATCH) + math.ceil(len(GOLDEN) / BATCH)
    assert len(calls) == expected
    assert max(calls) == BATCH * models


def test_perplexity_matches_eval_perplexity(run, assets):
    session, report = run["session"], run["report"]
    rows = select_rows(session.tokenizer, run["manifests"], str(assets["data"]), N_ROWS)
    assert rows.prompts == [s["prompt"] for s in report.samples]
    for label, name in (("base", None), ("tuned-a", "tuned-a")):
        with session.use(name) as model:
            want = perplexity(
                model, rows.examples, batch_size=3, pad_token_id=session.tokenizer.pad_token_id
            )
        assert report.metrics[label]["perplexity"] == pytest.approx(want["perplexity"], rel=1e-5)


def test_files_written(run):
    report = run["report"]
    folder = Path(report.folder)
    assert folder.parent == run["home"] / "evals" and folder.name == report.eval_id
    saved = json.loads((folder / "report.json").read_text())
    assert {
        "eval_id",
        "models",
        "metrics",
        "deltas",
        "samples",
        "worse",
        "golden",
        "settings",
        "timings",
        "hashes",
        "data",
    } <= set(saved)
    assert saved["timings"]["rows_per_second"] > 0
    assert set(saved["hashes"]["adapters"]) == set(ADAPTERS)
    with open(folder / "samples.csv", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0][:4] == ["index", "intent", "prompt", "reference"]
    assert "delta_rouge_l_tuned-a" in table[0] and len(table) == N_ROWS + 1
    column = table[0].index("addressed_intent_tuned-a")
    assert [r[column] for r in table[1:]] == [
        s["checks"]["tuned-a"]["intent"] for s in report.samples
    ]
    summary = (folder / "summary.md").read_text()
    assert "| base |" in summary and "| tuned-b |" in summary


def test_manifest_write_back_is_merged(run):
    report = run["report"]
    for name in ADAPTERS:
        manifest = run["manifests"][name]
        assert manifest["lora"] == {"r": 4} and manifest["data"]["train_rows"] == 12
        ev = manifest["eval"]
        assert ev["eval_id"] == report.eval_id and ev["report"] == report.folder
        assert ev["bleu"] == report.metrics[name]["bleu"]
        assert ev["perplexity"] == report.metrics[name]["perplexity"]
        assert (
            ev["golden_passed"] == 2 and ev["base"]["rouge_l"] == report.metrics["base"]["rouge_l"]
        )
        assert ev["delta"]["rouge_l"] == report.deltas[name]["rouge_l"]


def test_another_file_scores_its_first_rows(run, assets, tmp_path):
    other = tmp_path / "other.jsonl"
    lines = assets["data"].read_text().splitlines()[:5]
    other.write_text("\n".join(lines[::-1]) + "\n")
    report = evaluate(
        run["session"],
        ["tuned-a"],
        str(other),
        max_samples=3,
        batch_size=8,
        settings=GenerationSettings(max_new_tokens=2),
        golden=None,
        save=False,
    )
    assert not report.data["held_out"] and "does not reproduce" in report.data["selection"]
    assert [s["prompt"] for s in report.samples] == [
        json.loads(x)["prompt"] for x in lines[::-1][:3]
    ]
    assert report.golden["total"] == 0 and report.folder == ""


def test_support_checks_are_saved_and_the_gate_names_its_floors(run):
    report = run["report"]
    support = report.support
    assert support["column"] == "intent" and list(support["models"]) == report.models
    for m in report.models:
        r = support["models"][m]["right_intent"]
        assert r["rows"] == N_ROWS and r["right"] == sum(
            s["checks"][m]["right"] for s in report.samples
        )
        assert set(r["per_intent"]) == {"track_order", "refund"}
    assert (
        support["classifier"]["ceiling"]["rows"] == N_ROWS
        and "never the evaluated" in support["classifier"]["fitted_on"]
    )
    saved = json.loads((Path(report.folder) / "report.json").read_text())
    assert (
        saved["support"]["models"]["tuned-a"]["right_intent"]
        == support["models"]["tuned-a"]["right_intent"]
    )
    assert "## Support checks" in (Path(report.folder) / "summary.md").read_text()
    for a in ADAPTERS:
        verdict = report.gate[a]
        said = "; ".join(verdict["reasons"] + verdict["floors"])
        rate = support["models"][a]["right_intent"]["rate"]
        assert (
            f"right-intent rate {rate:.2f} "
            f"({support['models'][a]['right_intent']['right']}/{N_ROWS} rows" in said
        )
        assert (
            "the floor 0.85" in said
            and "hand-off floor 0.90 not checked: no evaluated row asks for a person" in said
        )
        assert Shelf().get(a).manifest["gate"]["floors"] == verdict["floors"]
    assert report.timings["support_checks_seconds"] == support["seconds"]


def test_cli_prints_table_and_exits_0(assets, home, tiny_llama_dir, capsys):
    Shelf()
    install(assets, home)
    code = main(
        [
            "--adapter",
            "tuned-a",
            "--adapter",
            "tuned-b",
            "--data",
            str(assets["data"]),
            "--max-samples",
            "3",
            "--max-new-tokens",
            "3",
            "--batch-size",
            "2",
            "--golden",
            str(assets["golden"]),
            "--threads",
            "1",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| base |" in out and "| tuned-a |" in out and "| tuned-b |" in out
    assert "support checks (right intent" in out and "| reference answers (ceiling) |" in out
    assert (
        "tuned-a by intent, lowest right-intent rate first:" in out and "right-intent rate" in out
    )
    report_dir = Path(out.strip().splitlines()[-1].removeprefix("report: "))
    assert (report_dir / "report.json").is_file() and report_dir.parent == home / "evals"


def test_an_adapter_trained_0_steps_is_named_as_the_base_in_disguise(
    assets, home, tiny_llama_dir, capsys
):
    # A run stopped before its first optimizer step saves PEFT's initial adapter: B = 0.
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    Shelf()
    install(assets, home)
    folder = home / "adapters" / "untrained"
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(
        folder
    )
    manifest = json.loads((assets["folders"]["tuned-a"] / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "name": "untrained", "steps": 0}))
    code = main(
        [
            "--adapter",
            "untrained",
            "--data",
            str(assets["data"]),
            "--max-samples",
            "3",
            "--max-new-tokens",
            "3",
            "--batch-size",
            "3",
            "--no-golden",
            "--threads",
            "1",
            "--quiet",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "warning: untrained was trained 0 steps" in captured.err
    report = json.loads(
        (
            Path(captured.out.strip().splitlines()[-1].removeprefix("report: ")) / "report.json"
        ).read_text()
    )
    assert [s["answers"]["untrained"] for s in report["samples"]] == [
        s["answers"]["base"] for s in report["samples"]
    ]
    assert any(
        "answers exactly as the base model" in n for n in report["gate"]["untrained"]["notes"]
    )
    trained = evaluate(
        ModelSession(str(tiny_llama_dir), dtype="float32"),
        ["tuned-a"],
        str(assets["data"]),
        max_samples=2,
        settings=GenerationSettings(max_new_tokens=2),
        golden=None,
        save=False,
    )
    assert not any("trained 0 steps" in n for n in trained.gate["tuned-a"]["notes"])


@pytest.mark.parametrize(
    "case",
    [
        "unknown adapter",
        "missing data",
        "mixed bases",
        "no such device",
        "threads",
        "empty golden",
        "binary golden",
        "golden phrases",
        "batch size",
        "answer cap",
    ],
)
def test_cli_bad_input_is_one_error_line(assets, home, capsys, case):
    Shelf()
    install(assets, home)
    data, adapters = str(assets["data"]), ["tuned-a"]
    if case == "unknown adapter":
        adapters = ["no-such-adapter"]
    elif case == "missing data":
        data = str(home / "missing.jsonl")
    elif case == "mixed bases":
        manifest_file = home / "adapters" / "tuned-b" / "manifest.json"
        manifest = json.loads(manifest_file.read_text())
        manifest["base_model"] = {"name": "gpt2", "weight_hash": "0" * 16}
        manifest_file.write_text(json.dumps(manifest))
        adapters = ["tuned-a", "tuned-b"]
    argv = [x for a in adapters for x in ("--adapter", a)] + ["--data", data, "--quiet"]
    golden = home / "golden.jsonl"
    golden.write_bytes(
        {
            "empty golden": b"\n",
            "binary golden": b"\xff\xfe\x00junk",
            "golden phrases": b'{"prompt": "hi", "must_contain": "refund"}\n',
        }.get(case, b"")
    )
    argv += {
        "no such device": ["--device", "tpu"],
        "threads": ["--threads", "-1"],
        "empty golden": ["--golden", str(golden)],
        "binary golden": ["--golden", str(golden)],
        "golden phrases": ["--golden", str(golden)],
        "batch size": ["--batch-size", "0"],
        "answer cap": ["--max-new-tokens", "0"],
    }.get(case, [])
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert {
        "unknown adapter": "no-such-adapter",
        "missing data": "missing.jsonl",
        "mixed bases": "different base models",
        "no such device": "no device 'tpu' on this machine",
        "threads": "--threads must be 0 (all cores) or more, not -1",
        "empty golden": "golden prompts file golden.jsonl holds no prompt",
        "binary golden": "golden prompts file golden.jsonl is not UTF-8 text",
        "golden phrases": "golden.jsonl line 1: 'must_contain' must be a list of phrases",
        # they named evaluate()'s parameters: batch_size, max_new_tokens
        "batch size": "cannot evaluate: --batch-size must be a whole number from 1 to 64, got 0",
        "answer cap": "--max-new-tokens must be a whole number from 1 to 2048, got 0",
    }[case] in err


def test_perplexity_delta_ci_resamples_rows():
    import numpy as np

    from eval.report import perplexity_delta_ci

    tokens = np.array([10, 20, 5, 8])
    base = {"nll": np.array([20.0, 50.0, 9.0, 16.0]), "tokens": tokens}
    tuned = {"nll": np.array([15.0, 40.0, 9.5, 12.0]), "tokens": tokens}
    delta, low, high = perplexity_delta_ci(base, tuned, seed=3)
    assert delta == pytest.approx(math.exp(76.5 / 43) - math.exp(95 / 43))
    assert low <= delta <= high < 0  # better on 3 of 4 rows: the whole interval is below 0
    assert perplexity_delta_ci(base, base) == (0.0, 0.0, 0.0)


def test_a_tuned_version_is_gated_against_its_parent(run):
    """An adapter whose manifest names a parent (a preference run's lineage) is scored beside
    it, and its release gate compares with the parent, not the base."""
    session, shelf = run["session"], Shelf()
    parent_hash = session.adapter_hash("tuned-a")
    shelf.write_manifest_fields(
        "tuned-b",
        {"lineage": {"parent": "tuned-a", "parent_hash": parent_hash, "method": "dpo", "pairs": 8}},
    )
    try:
        report = evaluate(
            session,
            ["tuned-b"],
            str(run["report"].data["path"]),
            max_samples=4,
            batch_size=4,
            settings=GenerationSettings(max_new_tokens=4),
            golden=None,
            save=False,
        )
        assert report.models == ["base", "tuned-b", "tuned-a"]
        against = report.against["tuned-b"]
        assert against["reference"] == "tuned-a" and report.gate["tuned-b"]["against"] == "tuned-a"
        ppl = {m: report.metrics[m]["perplexity"] for m in report.models}
        assert against["deltas"]["perplexity"]["delta"] == pytest.approx(
            ppl["tuned-b"] - ppl["tuned-a"]
        )
        assert report.deltas["tuned-b"]["perplexity"]["delta"] == pytest.approx(
            ppl["tuned-b"] - ppl["base"]
        )
        assert ppl["tuned-a"] != pytest.approx(ppl["base"])
        # The parent trained again since: the child is checked against the base, and told why.
        shelf.write_manifest_fields(
            "tuned-b", {"lineage": {"parent": "tuned-a", "parent_hash": "0" * 16}}
        )
        stale = evaluate(
            session,
            ["tuned-b"],
            str(run["report"].data["path"]),
            max_samples=4,
            batch_size=4,
            settings=GenerationSettings(max_new_tokens=4),
            golden=None,
            save=False,
        )
        assert stale.models == ["base", "tuned-b"] and stale.against == {}
        assert stale.gate["tuned-b"]["against"] == "base"
        assert any("not the version it was tuned from" in n for n in stale.gate["tuned-b"]["notes"])
    finally:
        shelf.write_manifest_fields("tuned-b", {"lineage": None})


def test_answer_cap_follows_the_references():
    from eval.run import answer_cap

    class Words:  # one token a word
        def __call__(self, text, add_special_tokens=False):
            return type("Encoded", (), {"input_ids": text.split()})

    def cap(lengths):
        return answer_cap(Words(), [" ".join(["w"] * n) for n in lengths])

    assert cap(range(0, 100)) == 96  # the 95th percentile of 1..100 tokens with the end of turn
    assert cap([149] * 90 + [199] * 10) == 208  # rounded up to 16
    assert cap([5] * 10) == 32 and cap([900] * 10) == 512 and cap([]) == 32


def test_no_answer_cap_given_means_the_references_length(run, tmp_path):
    from eval.run import answer_cap

    other = tmp_path / "long.jsonl"
    rows = [
        {"prompt": f"question {i}?", "response": " ".join(["word"] * (20 + 10 * i))}
        for i in range(4)
    ]
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate(
        run["session"],
        ["tuned-a"],
        str(other),
        max_samples=4,
        batch_size=4,
        golden=None,
        save=False,
    )
    tokenizer = run["session"].tokenizer
    longest = len(tokenizer(rows[-1]["response"], add_special_tokens=False).input_ids) + 1
    assert report.settings["generation"]["max_new_tokens"] == answer_cap(
        tokenizer, [r["response"] for r in rows]
    )
    assert longest <= report.settings["generation"]["max_new_tokens"] < longest + 16


def test_cli_reads_a_csv_of_other_column_names_once_they_are_named(assets, home, capsys):
    Shelf()
    install(assets, home)
    data = home / "tickets.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["customer_text", "agent_reply", "intent"])
        for i in range(6):
            intent = "track_order" if i % 2 else "refund"
            writer.writerow([f"where is parcel {i}?", f"Parcel {i} ships today.", intent])
    argv = ["--adapter", "tuned-a", "--data", str(data), "--max-samples", "3"]
    argv += ["--max-new-tokens", "2", "--no-golden", "--threads", "1", "--quiet"]

    assert main(argv) == 2  # the sentence names the flags it now has
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "name them with --prompt-column and --response-column" in err
    assert "columns: customer_text, agent_reply, intent" in err

    assert main([*argv, "--prompt-column", "customer", "--response-column", "agent_reply"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "error: prompt column 'customer' is not in the data "
        "(columns: customer_text, agent_reply, intent)"
    )

    code = main([*argv, "--prompt-column", "customer_text", "--response-column", "agent_reply"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    folder = Path(captured.out.strip().splitlines()[-1].removeprefix("report: "))
    report = json.loads((folder / "report.json").read_text())
    samples = [(s["prompt"], s["reference"]) for s in report["samples"]]
    assert samples == [(f"where is parcel {i}?", f"Parcel {i} ships today.") for i in range(3)]
    support = report["support"]  # the checks read the file in the same columns
    assert "error" not in support and support["column"] == "intent"
    assert support["models"]["tuned-a"]["right_intent"]["rows"] == 3


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--passages", "99"], "the passages per grounded answer must be from 1 to"),
        (["--max-samples", "0"], "--max-samples must be a whole number from 1 to 10000, got 0"),
    ],
)
def test_a_refusal_of_the_evaluation_is_not_printed_under_a_progress_bar(
    assets, home, capsys, flags, said
):
    Shelf()
    install(assets, home)
    code = main(["--adapter", "tuned-a", "--data", str(assets["data"]), *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and said in err
    assert len(err.strip().splitlines()) == 1 and "%|" not in err


def test_data_with_no_row_to_score_is_refused_before_the_weights_load(assets, home, capsys):
    """Rows are chosen with the tokenizer alone: the refusal came after the model's 'Loading
    weights' bar."""
    Shelf()
    install(assets, home)
    long = home / "long.jsonl"
    words = " ".join(["refund"] * 5000)
    long.write_text(json.dumps({"instruction": words, "response": "Sure."}) + "\n")
    code = main(["--adapter", "tuned-a", "--data", str(long)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "no row fits max_length" in err
    assert len(err.strip().splitlines()) == 1 and "Loading weights" not in err


def test_columns_named_as_training_found_them_keep_the_held_out_rows(run, assets):
    report = evaluate(
        run["session"],
        ["tuned-a"],
        str(assets["data"]),
        max_samples=2,
        settings=GenerationSettings(max_new_tokens=2),
        golden=None,
        save=False,
        columns={"prompt_column": "prompt", "response_column": "response"},
    )
    assert report.data["held_out"], report.data["selection"]
    assert not {s["prompt"] for s in report.samples} & assets["train_prompts"]
