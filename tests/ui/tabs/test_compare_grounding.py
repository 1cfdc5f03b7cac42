"""Compare grounds each pane the way Chat grounds an answer: an adapter trained beside
knowledge answers from its passages (the pane's text is the model's answer to the grounded
conversation), the base model ungrounded under ``auto``, and each pane says what it used."""

from __future__ import annotations

import json

from shelf_helpers import put_adapter
from ui_handlers import handlers

from knowledge.grounding import ground
from knowledge.passages import Passage
from knowledge.store import KnowledgeShelf
from ui.tabs.compare import NONE
from ui.views import chat_grounding

ASKED = "where is my parcel? it has not arrived"
PARCEL = Passage(
    "late parcel",
    "Parcels arrive in 3 to 5 days; track yours under My Orders.",
    "faq:row 1",
    "past_answer",
    "where is my parcel",
)


def test_each_pane_is_grounded_as_chat_would_and_says_from_what(home, varied_dir, monkeypatch):
    put_adapter(varied_dir, "support")
    KnowledgeShelf().add("faq", [PARCEL], ["faq.csv"])
    path = home / "adapters" / "support" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["knowledge"] = {"name": "faq", "version": "v1", "split": "train"}
    path.write_text(json.dumps(manifest))
    table = handlers(varied_dir)
    state = table["engine"]
    engines, asked = state.serving, []
    decode = engines.compare

    def spied(messages, adapters, settings=None, conversations=None):
        asked.append(conversations)
        return decode(messages, adapters, settings, conversations)

    # what each pane's model was asked, then answered as before; undone after the test (the
    # handlers' app state is shared by the process's tests)
    monkeypatch.setattr(engines, "compare", spied)
    *panes, info, _choice, shown, _asked = table["run"]("support", NONE, ASKED, "", 8, 1.0)
    assert 'adapter support: answered from: faq v1 #1 "late parcel"' in info
    assert "base model" not in info.partition("(greedy).")[2]  # auto: the base answers ungrounded
    plain = [{"role": "user", "content": ASKED}]
    grounded, _ = ground(plain, "faq", "v1", answer_tokens=8)
    assert asked[-1] == [plain, grounded] and PARCEL.text in grounded[0]["content"]
    # a pane's own conversation is what its model answers: the same engine path asked the
    # grounded conversation outright answers the same (one pane: no batch to differ by)
    settings = state.settings("", 8, 0.0, 0.9, 1.0, 0)
    via_pane = decode(plain, ["support"], settings, [grounded])[0][0].text
    assert via_pane == decode(grounded, ["support"], settings)[0][0].text
    assert via_pane != decode(plain, ["support"], settings)[0][0].text
    assert shown[1]["text"] and shown[0]["text"]
    # a verdict keeps what each pane was shown: the base pane (ungrounded) lost to the adapter's
    assert shown[0]["grounding"] is None and shown[1]["grounding"]["passage_ids"] == [1]
    table["on_save"](ASKED, shown, shown[1]["adapter"], "")
    from feedback.store import FeedbackStore

    (lost,) = [r for r in FeedbackStore().ratings() if r["source"] == "compare"]
    assert lost["adapter"] == shown[0]["adapter"] and "grounding" not in lost
    table["on_save"](ASKED, shown, None, "Your parcel ships in 3 to 5 days.")
    kept = {r["adapter"]: r.get("grounding") for r in FeedbackStore().ratings()}
    assert kept[shown[1]["adapter"]]["knowledge"] == "faq"
    assert kept[shown[1]["adapter"]]["version"] == "v1"
    assert kept[shown[1]["adapter"]]["passage_ids"] == [1]

    monkeypatch.setattr(
        state, "chat_knowledge", chat_grounding.OFF
    )  # Compare follows Chat's choice
    *_, info, _choice, shown_off, _asked = table["run"]("support", NONE, ASKED, "", 8, 1.0)
    assert "answered from" not in info and asked[-1] == [plain, plain]
