"""Adapters tab: the shelf — inspect, activate (hot-swap), rename, delete, export, import."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from adapters.export import export_merged, export_zip, import_adapter
from ui.engine import Engine
from ui.gguf_view import DEFAULT_TYPES, GGUF_TYPES, gguf_markdown
from ui.shelf_view import COLUMNS, details_markdown, shelf_rows


def build_adapters_tab(engine: Engine) -> dict:
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
            confirm = gr.Checkbox(label="Yes, delete this adapter for good", elem_id="shelf-confirm")
            delete = gr.Button("Delete", variant="stop", elem_id="shelf-delete")
        with gr.Accordion("Export GGUF (llama.cpp, Ollama, LM Studio)", open=False):
            gguf_types = gr.CheckboxGroup(GGUF_TYPES, value=DEFAULT_TYPES, label="Merged model types")
            gguf_lora = gr.Checkbox(label="Also base model + LoRA adapter (unmerged)")
            gguf_btn = gr.Button("Export GGUF", elem_id="shelf-gguf")
            gguf_result = gr.Markdown(elem_id="shelf-gguf-result")
        with gr.Accordion("Import a PEFT adapter (folder zipped, or .zip)", open=False):
            upload = gr.File(label="Adapter .zip", file_types=[".zip"])
            import_name = gr.Textbox(label="Name on the shelf (optional)")
            do_import = gr.Button("Import")
        message = gr.Markdown(elem_id="shelf-message")
        download = gr.File(label="Download", visible=False)

        def refresh_all(selected=None):
            entries = engine.shelf().list()
            names = [e.name for e in entries]
            value = selected if selected in names else (names[0] if names else None)
            frame = pd.DataFrame(shelf_rows(entries), columns=COLUMNS)
            return frame, gr.update(choices=names, value=value), _details(value)

        def _details(name):
            if not name:
                return "The shelf is empty: train an adapter in the Train tab or import one."
            try:
                return details_markdown(engine.shelf().get(name))
            except (ValueError, OSError) as err:
                return f"⚠️ {err}"

        def on_activate(name):
            if not name:
                return "Pick an adapter first."
            try:
                loaded = engine.activate(name)
            except (ValueError, OSError) as err:
                return f"⚠️ {err}"
            return f"**{name}** is active in Chat (hash `{getattr(loaded, 'adapter_hash', '')}`); the base model was not reloaded."

        def on_rename(name, new):
            try:
                engine.shelf().rename(name, (new or "").strip())
            except (ValueError, OSError) as err:
                return (f"⚠️ {err}", *refresh_all(name))
            if engine.active_adapter == name:
                engine.activate(None)
            return (f"Renamed **{name}** to **{new.strip()}**.", *refresh_all(new.strip()))

        def on_delete(name, sure):
            if not sure:
                return ("Tick the confirmation box first.", *refresh_all(name), False)
            try:
                if engine.active_adapter == name:
                    engine.activate(None)
                if name in engine.session.loaded_adapters:
                    engine.session.unload_adapter(name)
                engine.shelf().delete(name)
            except (ValueError, OSError) as err:
                return (f"⚠️ {err}", *refresh_all(name), False)
            return (f"Deleted **{name}**.", *refresh_all(), False)

        def on_export(name):
            try:
                out = export_merged(name, overwrite=True)
            except (ValueError, OSError) as err:
                return f"⚠️ {err}", gr.update(visible=False)
            return f"Merged model written to `{out}` (safetensors + tokenizer).", gr.update(visible=False)

        def on_gguf(name, types, lora, progress=gr.Progress()):
            from adapters.export.gguf import export_gguf

            if not name:
                return "Pick an adapter first."
            try:
                result = export_gguf(name, tuple(types or ()), lora=bool(lora), overwrite=True,
                                     on_progress=lambda f, m: progress(f, desc=m[:90]))
            except (ValueError, RuntimeError, OSError) as err:
                return f"⚠️ {err}"
            return gguf_markdown(result)

        def on_zip(name):
            try:
                out = export_zip(name)
            except (ValueError, OSError) as err:
                return f"⚠️ {err}", gr.update(visible=False)
            return f"Zipped to `{out}`.", gr.update(value=str(out), visible=True)

        def on_import(file, name):
            if not file:
                return ("Choose a .zip first.", *refresh_all())
            try:
                entry = import_adapter(file, name=(name or "").strip() or None)
            except (ValueError, OSError) as err:
                return (f"⚠️ Import refused: {err}", *refresh_all())
            return (f"Imported **{entry.name}**.", *refresh_all(entry.name))

        view = [table, pick, details]
        tab.select(refresh_all, pick, view)
        refresh.click(refresh_all, pick, view)
        pick.change(_details, pick, details)
        activate.click(on_activate, pick, message)
        rename.click(on_rename, [pick, new_name], [message, *view])
        delete.click(on_delete, [pick, confirm], [message, *view, confirm])
        export_btn.click(on_export, pick, [message, download])
        zip_btn.click(on_zip, pick, [message, download])
        gguf_btn.click(on_gguf, [pick, gguf_types, gguf_lora], gguf_result)
        do_import.click(on_import, [upload, import_name], [message, *view])
    return {"tab": tab, "pick": pick}
