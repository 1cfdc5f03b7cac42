"""The Train tab's time budget: the form shows minutes, the config holds seconds; blank
validation / probe / checkpoint cadences mean auto; Check says the run takes the budget."""

from core.hardware import detect
from ui.views import forms
from ui.views import train_actions as train_handlers
from ui.views.train_actions import DATA_SOURCES
from ui.views.train_check import estimate_text

AT = forms.TRAIN_FIELDS.index(("train", "time_budget_s"))
AUTO = [forms.TRAIN_FIELDS.index(("train", f)) for f in ("eval_every", "probe_every", "save_every")]


def _values(model_dir) -> list:
    cfg = forms.ui_defaults()
    cfg.model.name = str(model_dir)
    return forms.form_values(cfg)


def test_the_first_run_caps_the_rows_on_a_cpu_and_takes_every_row_on_a_gpu(monkeypatch):
    """On 2 cores 10 minutes pass over about 1,000 rows once; a GPU passes over every row of
    the data many times in them (finetune.config.first_run_defaults)."""
    from core import hardware
    from finetune.config import first_run_defaults

    cpu = first_run_defaults()
    assert cpu.data.max_samples == 1000 and cpu.train.batch_size == "auto"
    gpu = hardware.DeviceInfo(
        "cuda:0",
        "NVIDIA H200 (139 GiB)",
        139.0,
        {"fp32": None, "fp16": None, "bf16": None},
        {"none": None, "8bit": None, "4bit": None},
    )
    with_gpu = hardware.Hardware(
        devices=[hardware._cpu_info(None), gpu], cpu_threads=16, bitsandbytes="0.50.2"
    )
    monkeypatch.setattr(hardware, "detect", lambda: with_gpu)
    cfg = first_run_defaults()
    assert cfg.data.max_samples is None and cfg.train.precision == "bf16"
    assert (
        forms.form_values(forms.ui_defaults())[forms.TRAIN_FIELDS.index(("data", "max_samples"))]
        is None
    )


def test_the_form_opens_on_ten_minutes_with_auto_cadences(tiny_llama_dir):
    values = _values(tiny_llama_dir)
    assert values[AT] == 10 and [values[i] for i in AUTO] == [None, None, None]
    values[AT] = 2.5  # Gradio's Number gives minutes
    values[AUTO[0]] = ""  # a cleared box
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == [] and cfg.train.time_budget_s == 150 and cfg.train.eval_every is None
    assert forms.form_values(cfg)[AT] == 2.5
    values[AT] = "soon"
    assert forms.to_config(forms.DEMO_DATA, values)[1] == [
        "time budget (minutes) must be a number (got 'soon')"
    ]


def test_check_says_the_run_takes_the_budget_and_refuses_a_short_one(tiny_llama_dir):
    hw = detect()
    values = _values(tiny_llama_dir)
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert "The run takes its time budget, 10 min from start to saved adapter" in text
    values[AT] = 0.25  # 15 s
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert text.startswith("**These settings cannot run:**")
    assert (  # in the form's minutes (the CLI's --time-budget says it in seconds)
        "time budget (minutes) must be 0 (off) or between 0.5 (30 seconds) and 10080 (7 days) "
        "(got 0.25)" in text
    )
    values[AT] = -5  # the box has no minimum of Gradio's own, which answered a bare "Error"
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert text == (
        "**These settings cannot run:**\n- time budget (minutes) must be 0 (off) or between 0.5 "
        "(30 seconds) and 10080 (7 days) (got -5)"
    )
    values[AT] = 0  # the steps / epochs under Advanced
    assert "time budget" not in train_handlers.checked_text(
        hw, estimate_text, DATA_SOURCES[0], None, "", values
    )


def test_a_blank_or_zero_beta_means_the_methods_measured_default(tiny_llama_dir):
    from finetune.train.preference import PreferenceConfig

    at = forms.TRAIN_FIELDS.index(("train", "beta"))
    values = _values(tiny_llama_dir)
    assert values[at] is None  # the form opens blank
    for blank in (None, "", 0):  # a cleared Number box reaches the handler as 0
        values[at] = blank
        cfg, problems = forms.to_config(forms.DEMO_DATA, values)
        assert problems == [] and cfg.train.beta is None
    assert PreferenceConfig("a", "p.jsonl", method="cpo", beta=cfg.train.beta).beta == 0.05
    values[at] = 0.3
    assert forms.to_config(forms.DEMO_DATA, values)[0].train.beta == 0.3
    values[at] = -1
    cfg, _ = forms.to_config(forms.DEMO_DATA, values)
    from finetune.config import validate

    assert "beta must be a number between 0.0001 and 100.0 (got -1.0)" in validate(cfg)


def test_picking_a_method_shows_its_learning_rate_and_epochs_with_steps_off_and_the_budget_kept(
    tmp_path, home, tiny_llama_dir
):
    from shelf_helpers import put_adapter

    from finetune.preference_defaults import METHOD_DEFAULTS

    cpo = METHOD_DEFAULTS["cpo"]
    # max steps 0: the method's epochs count (the first run's 30 steps would cut DPO to 120 pairs)
    assert forms.method_settings("cpo") == (
        cpo.learning_rate,
        cpo.epochs,
        0,
        4,
        10,
        0,
    )  # measured at 4 pairs a step, without passages
    t = forms.ui_defaults().train
    assert forms.method_settings("sft") == (
        t.learning_rate,
        t.epochs,
        30,
        "auto",
        10,
        "auto",
    )  # back to SFT: its own (passages as the data says)
    assert forms.method_settings("sft")[0] > cpo.learning_rate  # SFT's is higher
    # What the form then sends: a preference run of the method's epochs under the 10-minute budget.
    put_adapter(tiny_llama_dir, "support")
    values = _values(tiny_llama_dir)
    fields = forms.TRAIN_FIELDS
    for (section, field), value in zip(
        (
            ("train", "learning_rate"),
            ("train", "epochs"),
            ("train", "max_steps"),
            ("train", "batch_size"),
            ("train", "time_budget_s"),
            ("data", "with_passages"),
        ),
        forms.method_settings("cpo"),
        strict=True,
    ):
        values[fields.index((section, field))] = value
    values[fields.index(("train", "method"))], values[fields.index(("train", "from_adapter"))] = (
        "cpo",
        "support",
    )
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    from finetune.config import validate

    assert problems == [] and validate(cfg) == []
    assert (
        cfg.train.max_steps,
        cfg.train.epochs,
        cfg.train.batch_size,
        cfg.train.time_budget_s,
    ) == (0, cpo.epochs, 4, 600)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        '{"prompt": "Where is my order?", "chosen": "On its way.", "rejected": "No idea."}\n'
    )
    text = train_handlers.checked_text(
        detect(), estimate_text, DATA_SOURCES[2], None, str(pairs), values
    )
    assert (
        "The CPO run trains 1.5 epochs or until its time budget, 10 min from start to saved "
        "adapter, ends" in text
    )


def test_check_and_start_refuse_a_budget_the_measured_speeds_cannot_fill(tiny_llama_dir, home):
    from finetune.train import speed_record
    from finetune.train.budget_plan import Measured

    hw = detect()
    values = _values(tiny_llama_dir)
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert (
        "No step time is measured yet for these settings on this machine: **Dry run** measures"
        in text
    )
    cfg, _ = forms.to_config(forms.DEMO_DATA, values)
    # A dry run on a busy machine: 5 min to start, 20 s a step of 8 rows, 6 s a validation batch.
    # Batch size auto takes 4 rows for 10 minutes, the most steps: 5 passes of 6 batches of 3 s,
    # probes 4 x 12 s, save 3, margin 6, half a step: (600-300-90-62) / 10 = 14 steps, too few.
    assert cfg.train.batch_size == "auto"
    speed_record.save(
        cfg,
        Measured(startup_s=300, step_s=20.0, val_batch_s=6.0, val_batches=3),
        "dry run",
        8,
        "cpu",
    )
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert text.startswith(
        "**These settings cannot run:**\n- A 10-minute budget buys about 14 steps here: "
        "start-up 300 s, validation 90 s (all 6 validation batches a pass)"
    )
    assert "A useful run needs at least 30 steps: give it at least 13 minutes" in text
    assert "Batch size auto takes 4 rows per micro-batch for it" in text
    message, run_id = train_handlers.start_run(hw, DATA_SOURCES[0], None, "", values)
    assert run_id is None and message.startswith(
        "**Not started — fix these first:**\n- A 10-minute budget buys"
    )
    values[AT] = 15  # 30 steps of 8 need 20 minutes; in 15 auto takes 5 rows a step, and says so
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert "A 15-minute budget buys about 33 steps here" in text and "cannot run" not in text
    assert "Batch size auto takes 5 rows per micro-batch for it: at 8 the budget would buy" in text
    values[AT] = 30  # a longer budget: Check says what it buys at 8, and no problem
    text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
    assert "A 30-minute budget buys about 64 steps here" in text and "cannot run" not in text
    assert "Batch size auto takes" not in text
