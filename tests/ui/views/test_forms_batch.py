"""The Train tab's batch size, a text box: what is typed reaches the check as typed (blank and
"auto" are auto), and a bad value is a sentence saying what is allowed."""

from core.hardware import detect
from ui.views import forms
from ui.views import train_actions as train_handlers
from ui.views.train_actions import DATA_SOURCES
from ui.views.train_check import estimate_text

AT = forms.TRAIN_FIELDS.index(("train", "batch_size"))


def _values(model_dir, batch) -> list:
    cfg = forms.ui_defaults()
    cfg.model.name = str(model_dir)
    values = forms.form_values(cfg)
    values[AT] = batch
    return values


def test_typed_sizes_reach_the_run_as_typed(tiny_llama_dir):
    for typed, taken in (("", "auto"), (None, "auto"), (" Auto ", "auto"), (" 16 ", 16), ("3", 3)):
        cfg, problems = forms.to_config(forms.DEMO_DATA, _values(tiny_llama_dir, typed))
        assert (problems, cfg.train.batch_size) == ([], taken), typed


def test_a_bad_size_is_said_not_replaced(tiny_llama_dir):
    hw = detect()
    for typed, said in (
        ("0", "batch size must be a whole number between 1 and 4096, or auto (got 0)"),
        ("eight", "batch size must be auto or a whole number (got 'eight')"),
        ("2.5", "batch size must be auto or a whole number (got '2.5')"),
    ):
        values = _values(tiny_llama_dir, typed)
        text = train_handlers.checked_text(hw, estimate_text, DATA_SOURCES[0], None, "", values)
        assert text == f"**These settings cannot run:**\n- {said}", typed
