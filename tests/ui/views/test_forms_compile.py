"""The Train tab's compile setting: auto by default, and what is picked reaches the run."""

from finetune.config import validate
from ui.views import forms

AT = forms.TRAIN_FIELDS.index(("train", "compile"))


def test_the_form_starts_on_auto_and_passes_on_what_is_picked():
    values = forms.form_values(forms.ui_defaults())
    assert values[AT] == "auto"
    for picked in ("on", "off"):
        values[AT] = picked
        cfg, problems = forms.to_config(forms.DEMO_DATA, values)
        assert not problems and cfg.train.compile == picked
    values[AT] = "sometimes"
    cfg, _ = forms.to_config(forms.DEMO_DATA, values)
    assert "compile must be one of auto, on, off (got 'sometimes')" in validate(cfg)
