"""The Adapters tab's "Export GGUF" button, called as the click would call it."""

from __future__ import annotations

from ui_handlers import handlers


def test_export_gguf_answers_in_a_sentence(home, tiny_llama_dir, random_lora_dir):
    from adapters.export import import_adapter

    on_gguf = handlers(tiny_llama_dir)["on_gguf"]
    assert on_gguf(None, ["q8_0"], False) == "Pick an adapter first."
    assert on_gguf("nope", ["q8_0"], False).startswith("⚠️ no adapter named 'nope'")
    import_adapter(random_lora_dir, name="tuned")
    assert "nothing to export" in on_gguf("tuned", [], False)
    # The tiny test tokenizer is one llama.cpp's converter does not know: its own reason shows,
    # after the merge ran (and reported progress), and nothing is left in exports/.
    message = on_gguf("tuned", ["q8_0"], False)
    assert message.startswith("⚠️ convert_hf_to_gguf.py failed") and "pre-tokenizer" in message
    assert "\n" not in message and list((home / "exports").iterdir()) == []


def test_a_folder_whose_name_is_not_utf8_is_listed_as_the_cli_lists_it(
    home, tiny_llama_dir, random_lora_dir
):
    import json
    import os

    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    os.mkdir(os.path.join(os.fsencode(home / "adapters"), b"caf\xe9-v1"))  # Latin-1 bytes
    frame, names, details = handlers(tiny_llama_dir)["refresh_all"]()
    shown = frame["name"].tolist()
    assert "tuned" in shown and "caf\\udce9-v1" in shown  # python -m adapters list prints the same
    json.dumps([frame.to_dict(), names, details]).encode("utf-8")  # what the page is sent


def test_each_button_with_no_adapter_picked_says_to_pick_one(home, tiny_llama_dir):
    table = handlers(tiny_llama_dir)
    # the shelf's own sentence was "the adapter name must be text, got None"
    assert table["on_export"](None)[0] == "Pick an adapter first."
    assert table["on_zip"](None)[0] == "Pick an adapter first."
    assert table["on_rename"](None, "tuned")[0] == "Pick an adapter first."
    said, *_, confirm = table["on_delete"](None, True)
    assert said == "Pick an adapter first." and confirm is False


def test_an_import_refusal_names_the_zip_as_uploaded(home, tiny_llama_dir, tmp_path):
    """Gradio keeps an upload as <temp dir>/<64 hex>/<its name>; the sentence names the file."""
    upload = tmp_path / "gradio" / ("47" * 32) / "fake.zip"
    upload.parent.mkdir(parents=True)
    upload.write_text("not a zip")
    said, *_ = handlers(tiny_llama_dir)["on_import"](str(upload), "")
    assert said == "⚠️ Import refused: fake.zip is neither an adapter folder nor a zip file"


def test_a_refused_new_name_keeps_its_backslash_in_the_markdown_line(
    home, tiny_llama_dir, random_lora_dir
):
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    said, *_ = handlers(tiny_llama_dir)["on_rename"]("tuned", "support/bot")
    # the message is Markdown, which drops a lone backslash: it is sent doubled, shown single
    assert said.startswith("⚠️ invalid adapter name 'support/bot'") and "'\\\\'" in said, said


def test_renaming_an_adapter_to_its_own_name_says_nothing_changed(
    home, tiny_llama_dir, random_lora_dir
):
    """It said "an adapter named 'tuned' already exists", the one being renamed; a blank new
    name, "invalid adapter name ''"."""
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    on_rename = handlers(tiny_llama_dir)["on_rename"]
    for typed in ("tuned", " tuned "):
        said, frame, pick, _ = on_rename("tuned", typed)
        assert said == "tuned already has that name; nothing changed.", said
        assert frame["name"].tolist() == ["tuned"] and pick["value"] == "tuned"
    said, *_ = on_rename("tuned", "  ")
    assert said == "Type the new name first.", said


def test_delete_unconfirmed_names_the_box_to_tick(home, tiny_llama_dir, random_lora_dir):
    """It said 'Tick the confirmation box first.', the tab holding other checkboxes too."""
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    said, frame, *_ = handlers(tiny_llama_dir)["on_delete"]("tuned", False)
    assert said == 'Tick "Yes, delete this adapter for good" first; nothing was deleted.', said
    assert frame["name"].tolist() == ["tuned"]


def test_a_button_on_an_adapter_gone_from_the_shelf_names_no_server_path(
    home, tiny_llama_dir, random_lora_dir
):
    """Deleted from another page while this one still lists it: Activate, Export and Download
    said "no adapter named 'tuned' on the shelf (<home>/adapters/tuned does not exist)"."""
    from adapters.export import import_adapter

    import_adapter(random_lora_dir, name="tuned")
    table = handlers(tiny_llama_dir)
    assert table["on_delete"]("tuned", True)[0] == "Deleted tuned."
    for said in (
        table["on_activate"]("tuned"),
        table["on_export"]("tuned")[0],
        table["on_zip"]("tuned")[0],
        table["_details"]("tuned"),
    ):
        assert said == "⚠️ no adapter named 'tuned' on the shelf: pick one it holds", said
