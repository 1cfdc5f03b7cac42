"""The Train tab's preference methods: Start with DPO on reviewed pairs continues a shelf
adapter in a run the tab follows; what cannot start says why before anything runs."""

from __future__ import annotations

import json
import time

from shelf_helpers import put_adapter
from ui_handlers import handlers

from finetune.train import runner
from ui.views import forms
from ui.views.train_actions import DATA_SOURCES

PATH = DATA_SOURCES[2]


def _values(model_dir, **train) -> list:
    cfg = forms.ui_defaults()
    cfg.model.name = str(model_dir)
    cfg.train.max_steps, cfg.train.batch_size, cfg.train.learning_rate = 2, 2, 5e-5
    cfg.train.time_budget_s = 0  # dpo / orpo run steps, not a time budget
    for k, v in train.items():
        setattr(cfg.train, k, v)
    # what picking the method sets in the tab: a preference run trains without passages
    cfg.data.with_passages = forms.method_settings(cfg.train.method)[5]
    return forms.form_values(cfg)


def test_start_runs_dpo_from_a_shelf_adapter_and_refuses_what_cannot_run(
    home, tiny_llama_dir, tmp_path
):
    put_adapter(tiny_llama_dir, "support")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"prompt": f"Question {i}?", "chosen": "Yes, done.", "rejected": "No."})
            + "\n"
            for i in range(4)
        )
    )
    table = handlers(tiny_llama_dir)
    message, run_id = table["on_start"](
        PATH, None, str(pairs), *_values(tiny_llama_dir, method="dpo")
    )
    assert run_id is None and "name the adapter to start from" in message
    assert "in Start from adapter (DPO / CPO / ORPO), under Advanced" in message
    assert "--from-adapter" not in message  # the CLI's flag, which the tab has not
    demo = forms.DEMO_DATA  # instruction/response rows are not pairs
    message, run_id = table["on_start"](
        PATH, None, demo, *_values(tiny_llama_dir, method="dpo", from_adapter="support")
    )
    assert run_id is None and "a pair needs prompt" in message
    message, run_id = table["on_start"](
        PATH, None, str(pairs), *_values(tiny_llama_dir, method="dpo", from_adapter="nope")
    )
    assert run_id is None and "no adapter named" in message
    message, run_id = table["on_start"](
        PATH, None, str(pairs), *_values(tiny_llama_dir, method="dpo", from_adapter="support")
    )
    assert run_id, message
    deadline = time.time() + 240
    while runner.get(run_id).state in runner.ACTIVE and time.time() < deadline:
        time.sleep(0.5)
    from ui.views.train_progress import run_view

    view = run_view(run_id)
    assert view["state"] == "done", view["log"]
    assert "step 2/2" in view["progress_html"] and view["adapter"]
    lineage = json.loads((home / "adapters" / view["adapter"] / "manifest.json").read_text())[
        "lineage"
    ]
    assert (lineage["parent"], lineage["method"], lineage["pairs"]) == ("support", "dpo", 4)


def test_check_and_start_with_sft_on_pairs_say_to_pick_a_preference_method(
    home, tiny_llama_dir, tmp_path
):
    from core.hardware import detect
    from ui.views.train_actions import checked_text
    from ui.views.train_check import estimate_text

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"prompt": "Where is my order?", "chosen": "On its way.", "rejected": "No."})
        + "\n"
    )
    said = (
        "pairs.jsonl looks like preference pairs (prompt, chosen, rejected columns), which SFT "
        "cannot train on: pick the preference Method DPO, CPO or ORPO under Advanced (it "
        "continues an adapter from the shelf), or give SFT prompt/response rows"
    )
    values = _values(tiny_llama_dir)  # the method SFT
    text = checked_text(detect(), estimate_text, PATH, None, str(pairs), values)
    assert text == f"**These settings cannot run:**\n- {said}"
    message, run_id = handlers(tiny_llama_dir)["on_start"](PATH, None, str(pairs), *values)
    assert run_id is None and message == f"**Not started — fix these first:**\n- {said}"
    # pairs beside a response column are rows SFT trains on
    pairs.write_text(
        json.dumps({"prompt": "Hi?", "response": "Hello.", "chosen": "Hello.", "rejected": "No."})
        + "\n"
    )
    assert "preference" not in checked_text(detect(), estimate_text, PATH, None, str(pairs), values)


def test_an_uploaded_file_is_named_as_uploaded_not_by_its_kept_copy(home, tiny_llama_dir, tmp_path):
    from core.hardware import detect
    from ui.views.train_actions import checked_text
    from ui.views.train_check import estimate_text

    upload = tmp_path / "gradio" / ("e0" * 32) / "my pairs.jsonl"  # as Gradio keeps an upload
    upload.parent.mkdir(parents=True)
    upload.write_text(
        json.dumps({"prompt": "Where is my order?", "chosen": "On its way.", "rejected": "No."})
        + "\n"
    )
    text = checked_text(
        detect(), estimate_text, DATA_SOURCES[1], str(upload), "", _values(tiny_llama_dir)
    )
    # the copy kept under datasets/uploads is my_pairs-<hash>.jsonl, a name the user never gave
    assert text.startswith("**These settings cannot run:**\n- my pairs.jsonl looks like preference")
    assert list((home / "datasets" / "uploads").glob("my_pairs-*.jsonl"))


def test_a_preference_run_whose_adapter_name_is_taken_is_refused_before_it_starts(
    home, tiny_llama_dir, tmp_path
):
    from core.hardware import detect
    from ui.views.train_actions import checked_text
    from ui.views.train_check import estimate_text

    put_adapter(tiny_llama_dir, "support")
    put_adapter(tiny_llama_dir, "support-dpo")  # the first DPO run of support, unnamed
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"prompt": "Where is my order?", "chosen": "On its way.", "rejected": "No."})
        + "\n"
    )
    values = _values(tiny_llama_dir, method="dpo", from_adapter="support")
    message, run_id = handlers(tiny_llama_dir)["on_start"](PATH, None, str(pairs), *values)
    # it started, and failed in its child: "...; pick another --name", a flag the tab lacks
    assert run_id is None and message == (
        "**Not started — fix these first:**\n- an adapter named 'support-dpo' is already on the "
        "shelf (a DPO run of support takes it): type another Adapter name"
    )
    values[forms.TRAIN_FIELDS.index(("run", "adapter_name"))] = "support-dpo-2"
    text = checked_text(detect(), estimate_text, PATH, None, str(pairs), values)
    assert text.startswith("Settings are valid"), text
