"""ui/views/uploads.py: a path typed into a tab is read as the file it names, quotes pasted
around it included (a file manager's "Copy as path" adds them)."""

from __future__ import annotations

from ui.views import train_actions as train
from ui.views import transcripts
from ui.views.uploads import typed_path

DEMO = "assets/demo_support.jsonl"


def test_a_path_pasted_in_quotes_is_the_file_it_names(tmp_path):
    for typed in (f'"{DEMO}"', f"'{DEMO}'", f'  "{DEMO}" '):
        assert typed_path(typed) == DEMO, typed
    odd = tmp_path / '"odd".jsonl'  # a name that holds the quotes itself stays as typed
    odd.write_text("{}\n")
    assert typed_path(str(odd)) == str(odd)
    assert typed_path('"nope.jsonl"') == '"nope.jsonl"'  # nothing there either way: as typed
    assert typed_path('"half.jsonl') == '"half.jsonl'


def test_the_train_tabs_path_and_the_helpdesk_import_take_a_quoted_path(home, tmp_path):
    # it said 'dataset file "assets/demo_support.jsonl" does not exist'
    info, frame = train.data_preview(train.DATA_SOURCES[2], None, f'"{DEMO}"')
    assert frame is not None and "rows" in info, info
    export = tmp_path / "tickets.csv"
    export.write_text(
        "ticket_id,role,text\n1,customer,Where is my parcel?\n1,agent,On its way.\n"
        "2,customer,Can I get a refund?\n2,agent,Yes within 30 days.\n"
    )
    text, rows, train_file, _ = transcripts.import_export(None, f"'{export}'", "", "", 0.0)
    assert train_file is not None and text.startswith("**Imported 2 conversations"), text
