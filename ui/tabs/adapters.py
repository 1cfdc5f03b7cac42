"""Adapters tab: the shelf — inspect, activate (hot-swap), rename, delete, export, import;
aliases (one model name over weighted versions) in their own section."""

from __future__ import annotations

import gradio as gr
import pandas as pd

import adapters.shelf_actions as actions
from core.user_text import printable
from ui.tabs.aliases import build_aliases_section
from ui.views.gguf import DEFAULT_TYPES, GGUF_TYPES, gguf_markdown
from ui.views.shelf import COLUMNS, details_markdown, shelf_rows
from ui.views.state import AppState
from ui.views.uploads import by_upload_name
from ui.views.wording import as_markdown, for_ui

PICK_FIRST = "Pick an adapter first."  # no adapter picked: the shelf's sentence said "got None"
TYPE_NAME_FIRST = "Type the new name first."


def build_adapters_tab(state: AppState) -> dict:
    with gr.Tab("Adapters", id="adapters") as tab:
        table = gr.Dataframe(headers=COLUMNS, interactive=False, wrap=True, elem_id="shelf-table")
        with gr.Row():
            pick = gr.Dropdown([], label="Adapter", scale=3, elem_id="shelf-pick")
            refresh = gr.Button("↻ Refresh", scale=1)
        details = gr.Markdown(elem_id="shelf-details")
        with gr.Row():
            activate = gr.Button("Activate for Chat", variant="primary", elem_id="shelf-activate")
            export_btn = gr.Button("Export merged model")
            zip_btn = gr.Button("Download adapter (.zip)")
        with gr.Row():
            new_name = gr.Textbox(label="New name", scale=3)
            rename = gr.Button("Rename", scale=1)
        with gr.Row():
            confirm = gr.Checkbox(
                label="Yes, delete this adapter for good", elem_id="shelf-confirm"
            )
            delete = gr.Button("Delete", variant="stop", elem_id="shelf-delete")
        with gr.Accordion("Export GGUF (llama.cpp, Ollama, LM Studio)", open=False):
            gguf_types = gr.CheckboxGroup(
                GGUF_TYPES, value=DEFAULT_TYPES, label="Merged model types"
            )
            gguf_lora = gr.Checkbox(label="Also base model + LoRA adapter (unmerged)")
            gguf_btn = gr.Button("Export GGUF", elem_id="shelf-gguf")
            gguf_result = gr.Markdown(elem_id="shelf-gguf-result")
        with gr.Accordion("Import a PEFT adapter (folder zipped, or .zip)", open=False):
            upload = gr.File(label="Adapter .zip", file_types=[".zip"])
            import_name = gr.Textbox(label="Name on the shelf (optional)")
            do_import = gr.Button("Import")
        message = gr.Markdown(elem_id="shelf-message")
        download = gr.File(label="Download", visible=False)
        build_aliases_section(state)

        def refresh_all(selected=None):
            entries = state.shelf().list()
            names = [printable(e.name) for e in entries]  # odd folder names shown as the CLI does
            value = selected if selected in names else (names[0] if names else None)
            frame = pd.DataFrame(shelf_rows(entries), columns=COLUMNS)
            return frame, gr.update(choices=names, value=value), _details(value)

        def _details(name):
            if not name:
                return "The shelf is empty: train an adapter in the Train tab or import one."
            try:
                return details_markdown(state.shelf().get(name))
            except (ValueError, OSError) as err:
                return f"⚠️ {as_markdown(for_ui(str(err)))}"

        def on_activate(name):
            if not name:
                return PICK_FIRST
            try:
                loaded = state.activate(name)
            except (ValueError, OSError) as err:
                return f"⚠️ {as_markdown(for_ui(str(err)))}"
            return (
                f"**{name}** is active in Chat (hash "
                f"`{getattr(loaded, 'adapter_hash', '')}`); the base model was not reloaded."
            )

        # The sentences come from adapters.shelf_actions, shared with `python -m adapters`.
        def on_rename(name, new):
            if not name:
                return (PICK_FIRST, *refresh_all())
            if not (new or "").strip():  # the shelf said "invalid adapter name ''"
                return (TYPE_NAME_FIRST, *refresh_all(name))
            try:
                said = actions.rename(name, new, session=state.session)
            except (ValueError, OSError) as err:
                return (f"⚠️ {as_markdown(for_ui(str(err)))}", *refresh_all(name))
            return (said, *refresh_all(new.strip()))

        def on_delete(name, sure):
            if not name:
                return (PICK_FIRST, *refresh_all(), False)
            try:
                said = actions.delete(name, bool(sure), session=state.session)
            except (ValueError, OSError) as err:
                said = as_markdown(for_ui(str(err)))
                return (
                    f"⚠️ {said}" if sure else said,
                    *refresh_all(name),
                    False,
                )
            return (said, *refresh_all(), False)

        def on_export(name):
            if not name:
                return PICK_FIRST, gr.update(visible=False)
            try:
                said, _ = actions.export_merged(name, overwrite=True)
            except (ValueError, OSError) as err:
                return f"⚠️ {as_markdown(for_ui(str(err)))}", gr.update(visible=False)
            return said, gr.update(visible=False)

        def on_gguf(name, types, lora, progress=gr.Progress()):
            from adapters.export.gguf import export_gguf

            if not name:
                return PICK_FIRST
            try:
                result = export_gguf(
                    name,
                    tuple(types or ()),
                    lora=bool(lora),
                    overwrite=True,
                    on_progress=lambda f, m: progress(f, desc=m[:90]),
                )
            except (ValueError, RuntimeError, OSError) as err:
                return f"⚠️ {as_markdown(for_ui(str(err)))}"
            return gguf_markdown(result)

        def on_zip(name):
            if not name:
                return PICK_FIRST, gr.update(visible=False)
            try:
                said, out = actions.export_zip(name)
            except (ValueError, OSError) as err:
                return f"⚠️ {as_markdown(for_ui(str(err)))}", gr.update(visible=False)
            return said, gr.update(value=str(out), visible=True)

        def on_import(file, name):
            if not file:
                return ("Choose a .zip first.", *refresh_all())
            try:
                said, entry = actions.import_adapter(file, name)
            except (ValueError, OSError) as err:  # named as uploaded, not by its temporary copy
                return (f"⚠️ {as_markdown(by_upload_name(str(err), [file]))}", *refresh_all())
            return (said, *refresh_all(entry.name))

        view = [table, pick, details]
        tab.select(refresh_all, pick, view)
        refresh.click(refresh_all, pick, view, api_name="list_adapters")
        pick.change(_details, pick, details)
        activate.click(on_activate, pick, message, api_name="activate_adapter")
        rename.click(on_rename, [pick, new_name], [message, *view], api_name="rename_adapter")
        delete.click(
            on_delete, [pick, confirm], [message, *view, confirm], api_name="delete_adapter"
        )
        export_btn.click(on_export, pick, [message, download])
        zip_btn.click(on_zip, pick, [message, download])
        gguf_btn.click(on_gguf, [pick, gguf_types, gguf_lora], gguf_result)
        do_import.click(
            on_import, [upload, import_name], [message, *view], api_name="import_adapter"
        )
    return {"tab": tab, "pick": pick}
