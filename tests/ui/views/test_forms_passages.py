"""ui/views/forms.py: the Train tab's "train with N past answers" box reaches DataArgs."""

from finetune.config import validate
from ui.views import forms

AT = forms.TRAIN_FIELDS.index(("data", "with_passages"))


def test_the_form_sends_the_number_of_passages():
    values = forms.form_values(forms.ui_defaults())
    assert values[AT] == "auto"  # the run measures its data and decides
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == [] and cfg.data.with_passages == "auto" and validate(cfg) == []
    values[AT] = 2.0  # a number, as a float
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == [] and cfg.data.with_passages == 2 and validate(cfg) == []


def test_a_bad_number_of_passages_is_a_sentence():
    values = forms.form_values(forms.ui_defaults())
    values[AT] = 1.5
    problems = forms.to_config(forms.DEMO_DATA, values)[1]
    assert problems == ["passages per training row must be auto or a whole number (got 1.5)"]
    values[AT] = 9
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == []
    refused = "passages per training row must be a whole number between 0 and 5 (got 9)"
    assert refused in validate(cfg)


def test_passages_are_refused_for_a_preference_run():
    cfg = forms.ui_defaults()
    cfg.data.with_passages, cfg.train.method, cfg.train.from_adapter = 2, "dpo", "support"
    assert any("training with passages is for sft" in p for p in validate(cfg))
    cfg.train.method = "sft"
    assert validate(cfg) == []


def test_the_form_sends_the_share_of_rows_shown_passages():
    share_at = forms.TRAIN_FIELDS.index(("data", "passage_share"))
    values = forms.form_values(forms.ui_defaults())
    values[AT], values[share_at] = 1.0, 0.5
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert problems == [] and (cfg.data.with_passages, cfg.data.passage_share) == (1, 0.5)
    values[share_at] = 2
    cfg, problems = forms.to_config(forms.DEMO_DATA, values)
    assert (
        "share of training rows shown passages must be a number between 0.0 and 1.0 (got 2.0)"
        in (validate(cfg))
    )
