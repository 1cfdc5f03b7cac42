"""The intent classifier: a real scikit-learn fit on small labelled answers, scored on
hand-written ones."""

from __future__ import annotations

import pytest

from eval.checks.intent import fit, rates

ANSWERS = {
    "track_order": [
        "Your parcel is on its way; the tracking page shows where it is.",
        "The courier has your package; follow the tracking link for its location.",
        "Track the delivery of your order from the orders page to see where it is.",
    ],
    "get_refund": [
        "I have started your refund; the money returns to your card in 5 days.",
        "Refunds go back to the original payment method once we get the item.",
        "Your refund is approved and the amount is credited to your card.",
    ],
    "recover_password": [
        "Click 'forgot password' and follow the e-mail to set a new password.",
        "To reset your password, open the login page and choose reset password.",
        "A password reset link was sent; choose a new password from it.",
    ],
}


@pytest.fixture(scope="module")
def classifier():
    texts = [t for answers in ANSWERS.values() for t in answers]
    labels = [intent for intent, answers in ANSWERS.items() for _ in answers]
    return fit(texts, labels)


def test_answers_are_named_by_the_intent_they_address(classifier):
    named = classifier.predict(
        [
            "Here is the tracking link so you can see where your parcel is.",
            "Your refund goes back to your card.",
            "Use the reset link to choose a new password.",
        ]
    )
    assert named == ["track_order", "get_refund", "recover_password"]
    assert classifier.labels == sorted(ANSWERS) and classifier.rows == 9
    assert classifier.predict(["", "  ", "Your refund is on your card."]) == [
        "",
        "",
        "get_refund",
    ]  # empty: none


def test_rates_count_right_and_wrong_answers_per_intent(classifier):
    asked = ["track_order", "track_order", "get_refund", None]
    answers = [
        "Follow the tracking link to see where your parcel is.",
        "Reset your password from the login page.",  # a fluent answer to another question
        "The refund is credited to your card.",
        "Anything at all.",
    ]
    found = rates(asked, classifier.predict(answers))
    assert (found["right"], found["rows"]) == (2, 3) and found["rate"] == pytest.approx(2 / 3)
    assert found["per_intent"]["track_order"] == {"rate": 0.5, "right": 1, "rows": 2}
    assert found["per_intent"]["get_refund"]["rate"] == 1.0


def test_one_intent_cannot_train_a_classifier():
    with pytest.raises(ValueError, match="at least 2 intents"):
        fit(["a", "b"], ["only", "only"])
    assert rates([None], ["x"])["rate"] is None
