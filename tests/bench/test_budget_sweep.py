"""`python -m bench budget-sweep` on the tiny model: every variant trains for its budget on the
first rows and is scored on the rows after them."""

import csv

from bench.budget_sweep import VARIANTS, main, variant_config


def _rows_csv(path, n):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["instruction", "intent", "response"])
        writer.writeheader()
        for i in range(n):
            intent = ("track_order", "cancel_order")[i % 2]
            writer.writerow(
                {
                    "instruction": f"question {i} about {intent}",
                    "intent": intent,
                    "response": f"Answer {i}: here is how to {intent.replace('_', ' ')}.",
                }
            )
    return path


def test_each_variant_changes_one_setting_of_the_train_tabs_defaults(tmp_path):
    default = variant_config("default", tmp_path / "rows.csv", 1000, 3)
    assert default.train.time_budget_s == 180 and default.data.max_samples == 1000
    changed = {name: variant_config(name, tmp_path / "rows.csv", 1000, 3) for name in VARIANTS}
    assert changed["lr-5e-4"].train.learning_rate == 5e-4 != default.train.learning_rate
    assert changed["r8-attention"].lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert changed["packing"].data.packing and not default.data.packing
    assert changed["length-384"].data.max_length == 384 != default.data.max_length


def test_a_sweep_trains_every_variant_and_scores_them_on_the_same_unseen_rows(
    tmp_path, tiny_llama_dir, capsys, monkeypatch
):
    import bench.budget_sweep as sweep

    def two_steps(*args):  # the budget itself is tested in tests/finetune/train/test_budget.py
        cfg = variant_config(*args)
        cfg.train.time_budget_s, cfg.train.max_steps = 0, 2
        return cfg

    monkeypatch.setattr(sweep, "variant_config", two_steps)
    data = _rows_csv(tmp_path / "rows.csv", 60)
    home = tmp_path / "home"
    assert (
        main(
            [
                "--model",
                str(tiny_llama_dir),
                "--data",
                str(data),
                "--minutes",
                "1",
                "--rows",
                "40",
                "--score-rows",
                "10",
                "--variants",
                "default,lr-1e-3",
                "--home",
                str(home),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    table = [
        line
        for line in out.splitlines()
        if line.startswith("| default |") or line.startswith("| lr-1e-3 |")
    ]
    assert len(table) == 2
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert (
            int(cells[2]) == 2 and float(cells[6]) > 1.0
        )  # steps bought, perplexity on the sweep's rows
    with open(home / "sweep-score.csv", encoding="utf-8") as fh:
        scored = list(csv.DictReader(fh))
    assert [r["instruction"] for r in scored] == [
        f"question {i} about {('track_order', 'cancel_order')[i % 2]}" for i in range(40, 50)
    ]
    assert sorted(p.name for p in (home / "adapters").iterdir()) == [
        "sweep-default",
        "sweep-lr-1e-3",
    ]  # no warm-up
    assert (
        main(["--variants", "nope", "--data", str(data)]) == 2
        and "unknown variant" in capsys.readouterr().out
    )
