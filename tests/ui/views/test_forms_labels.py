"""The Train form's sentences for a value it cannot convert name the setting as the checks
after it do (finetune.config.validate), and a blank number box as empty, not as None."""

from ui.views import forms


def _refused(**typed) -> list[str]:
    values = forms.form_values(forms.ui_defaults())
    for field, value in typed.items():
        section = next(s for s, f in forms.TRAIN_FIELDS if f == field)
        values[forms.TRAIN_FIELDS.index((section, field))] = value
    return forms.to_config(forms.DEMO_DATA, values)[1]


def test_a_blank_number_box_is_said_to_be_empty():
    assert _refused(learning_rate=None, r=None) == [
        "LoRA rank r must be a number (the box is empty)",
        "learning rate must be a number (the box is empty)",
    ]


def test_a_value_that_is_not_a_number_is_named_as_the_checks_name_it():
    assert _refused(eval_every="often", alpha="x", dropout="high") == [
        "LoRA alpha must be a number (got 'x')",
        "LoRA dropout must be a number (got 'high')",
        "validate every N steps must be a number (got 'often')",
    ]
