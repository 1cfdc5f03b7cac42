"""Train tab: choose model, data and settings; start, watch, stop; re-attach after reload.

Layout and wiring only; what each control does is in ui/views/train_actions.py (no gradio).
"""

from __future__ import annotations

import gradio as gr

from core.model_catalog import choices as model_choices
from ui.tabs.train_advanced import advanced_settings
from ui.views import forms, model_pick, transcripts
from ui.views import train_actions as handlers
from ui.views.state import AppState
from ui.views.train_actions import DATA_SOURCES
from ui.views.train_check import dry_run_text, estimate_text, model_note
from ui.views.train_progress import curve_frame, run_view


def build_train_tab(state: AppState) -> dict:
    """The Train tab's components and events; returns what the app wires across tabs."""
    hw = state.hardware
    d = forms.ui_defaults()
    d.model.name = state.base_model  # train on the model the app serves, unless the user changes it
    with gr.Tab("Train", id="train") as tab:
        run_id = gr.State(None)
        curve_key = gr.State(None)  # (run, points) last drawn: redraw the plot only when it changed
        with gr.Row():
            with gr.Column(scale=1):
                model = model_picker(d.model.name)
                cost_note = gr.Markdown(model_note(d.model.name), elem_id="train-model-cost")
                source = gr.Radio(DATA_SOURCES, value=DATA_SOURCES[0], label="Dataset")
                upload = gr.File(
                    label="Upload (.jsonl .json .csv .parquet)",
                    file_types=list(forms_types()),
                    visible=False,
                )
                path = gr.Textbox(label="Dataset path", visible=False, elem_id="train-path")
                data_info = gr.Markdown()
                data_preview = gr.Dataframe(
                    label="First rows", interactive=False, wrap=True, max_height=220
                )
                imported, held_out_file = _helpdesk_import(source, path)
            with gr.Column(scale=1):
                dev_offer = forms.device_offer(hw)
                device = gr.Dropdown(dev_offer.choices, value="auto", label="Device")
                p0, q0 = (
                    forms.option_offer(hw, "auto", "precision"),
                    forms.option_offer(hw, "auto", "quantization"),
                )
                precision = gr.Dropdown(
                    p0.choices,
                    value=forms.default_precision(hw, "auto"),
                    label="Precision",
                    elem_id="train-precision",
                )
                quant = gr.Dropdown(
                    q0.choices, value="none", label="Quantization", elem_id="train-quant"
                )
                hw_notes = gr.Markdown(
                    "\n".join(f"- {n}" for n in dev_offer.notes + p0.notes + q0.notes),
                    elem_id="hw-notes",
                )
                # No minimum on the number boxes: Gradio's own check refused a bad value with a
                # bare "Error"; forms.to_config and finetune.config.validate say what is allowed.
                budget = gr.Number(
                    d.train.time_budget_s / 60,
                    label="Time budget (minutes)",
                    elem_id="train-budget",
                    info="Train for this long, start to saved adapter: steps, learning-rate "
                    "schedule and validation are sized to end on time. 0 = use the steps / "
                    "epochs under Advanced.",
                )
                with gr.Row():
                    batch = gr.Textbox(
                        str(d.train.batch_size),
                        placeholder="auto",
                        label="Batch size",
                        info=forms.BATCH_INFO,
                        elem_id="train-batch",
                    )
                    accum = gr.Number(
                        d.train.grad_accum,
                        precision=0,
                        label="Gradient accumulation",
                        elem_id="train-accum",
                    )
                advanced = advanced_settings(d, state.adapter_choices())
                name = gr.Textbox(label="Adapter name (optional)", elem_id="train-name")
        controls = {
            "name": model,
            "device": device,
            "precision": precision,
            "quantization": quant,
            "batch_size": batch,
            "grad_accum": accum,
            "time_budget_s": budget,
            "adapter_name": name,
            **advanced,
        }
        settings = [controls[field] for _, field in forms.TRAIN_FIELDS]  # the form's order
        method, from_adapter = advanced["method"], advanced["from_adapter"]
        tab.select(lambda: gr.update(choices=["", *state.adapter_choices()]), None, from_adapter)
        with gr.Row():
            check = gr.Button("Check settings & estimate", elem_id="train-check")
            dry = gr.Button("Dry run (one step)", elem_id="train-dry")
            start = gr.Button("Start training", variant="primary", elem_id="train-start")
            stop = gr.Button("Stop", variant="stop", elem_id="train-stop")
        message = gr.Markdown(elem_id="train-message")
        progress = gr.HTML(run_view(None)["progress_html"])
        curve = gr.LinePlot(
            curve_frame([]),
            x="step",
            y="loss",
            color="series",
            title="Loss (train and validation)",
            elem_id="loss-curve",
            height=260,
        )
        probes = gr.Dataframe(
            headers=["probe prompt", "current answer"],
            label="Probe answers",
            wrap=True,
            interactive=False,
            elem_id="probe-answers",
        )
        result = gr.Markdown(elem_id="train-result")
        to_compare = gr.Button(
            "Compare the new adapter with the base model →",
            visible=False,
            elem_id="train-to-compare",
        )
        log = gr.Textbox(label="Log tail", lines=6, max_lines=12, interactive=False)
        timer = gr.Timer(2.0)

        # Thin wrappers: the work is in ui/views/train_actions.py; these only turn it into updates.
        def on_source(src):
            return gr.update(visible=src == DATA_SOURCES[1]), gr.update(
                visible=src == DATA_SOURCES[2]
            )

        def on_data(src, upload_file, typed):
            info, frame = handlers.data_preview(src, upload_file, typed)
            return info, gr.update(value=frame)

        def on_device(dev):
            p_choices, p_default, q_choices, notes = handlers.device_options(
                hw, dev_offer.notes, dev
            )
            return (
                gr.update(choices=p_choices, value=p_default),
                gr.update(choices=q_choices),
                notes,
            )

        def checked(fn):
            def handler(src, upload_file, typed, *values):
                return handlers.checked_text(hw, fn, src, upload_file, typed, values)

            return handler

        def on_start(src, upload_file, typed, *values):
            return handlers.start_run(hw, src, upload_file, typed, values)

        def on_stop(current):
            return handlers.stop_run(current)

        def poll(current, drawn):
            current, view = handlers.poll_run(current)
            key = (current, len(view["curve"]))
            frame = gr.skip() if key == drawn else curve_frame(view["curve"])
            return (
                current,
                key,
                view["progress_html"],
                frame,
                view["probes"] or None,
                view["result"],
                gr.update(visible=view["comparable"]),
                view["log"],
            )

        source.change(on_source, source, [upload, path])
        for trigger, api in (
            (source.change, None),
            (upload.change, None),
            (path.submit, "preview_data"),
        ):
            trigger(on_data, [source, upload, path], [data_info, data_preview], api_name=api)
        imported.then(
            on_data, [source, upload, path], [data_info, data_preview]
        )  # the new dataset's rows
        device.change(on_device, device, [precision, quant, hw_notes])
        model.change(on_model, model, [model, cost_note], show_progress="hidden")
        # Each method's own learning rate, epochs, steps, batch size, time budget and passages
        # per row (preference methods: their epochs, no passages)
        method.input(
            forms.method_settings,
            method,
            [advanced[f] for f in ("learning_rate", "epochs", "max_steps")]
            + [batch, budget, advanced["with_passages"]],
        )
        check.click(
            checked(estimate_text),
            [source, upload, path, *settings],
            message,
            api_name="check_settings",
        )
        dry.click(
            checked(dry_run_text),
            [source, upload, path, *settings],
            message,
            concurrency_id="heavy",
        )
        start.click(
            on_start,
            [source, upload, path, *settings],
            [message, run_id],
            concurrency_id="train-start",
            api_name="start_training",
        )
        stop.click(on_stop, run_id, message)
        outputs = [run_id, curve_key, progress, curve, probes, result, to_compare, log]
        timer.tick(poll, [run_id, curve_key], outputs, show_progress="hidden")
        tab.select(poll, [run_id, gr.State(None)], outputs, show_progress="hidden")
        tab.select(on_data, [source, upload, path], [data_info, data_preview])
        # The Train tab is the first one shown: fill it when the page opens too.
        on_load = [
            (poll, [run_id, gr.State(None)], outputs),
            (on_data, [source, upload, path], [data_info, data_preview]),
        ]
    return {
        "tab": tab,
        "to_compare": to_compare,
        "run_id": run_id,
        "on_load": on_load,
        "imported": imported,
        "held_out_file": held_out_file,
    }


def on_model(typed):
    """A catalog name typed in full becomes its model; a part of names says which they are."""
    picked = model_pick.picked_model(typed)
    shown = gr.update(value=picked) if picked != (typed or "") else gr.skip()
    return shown, model_pick.hint(typed) or model_note(picked)


def model_picker(value: str) -> gr.Dropdown:
    """The base-model picker: the recommended models by name, or any Hub id or folder typed in."""
    return gr.Dropdown(
        model_choices(),
        value=value,
        allow_custom_value=True,
        filterable=True,
        elem_id=model_pick.PICKER_ID,  # Enter takes the text typed: ui/views/typed_choice.py
        label="Base model (pick one, or type a Hub id or local folder)",
        info="Check settings & estimate quotes what the picked model costs, as measured.",
    )


def _helpdesk_import(source, path):
    """A helpdesk export -> redacted conversations; on success the dataset
    becomes its train.jsonl."""
    with gr.Accordion("Import a helpdesk export (tickets → redacted conversations)", open=False):
        export = gr.File(
            label="Helpdesk export: one row per message (.csv .tsv .jsonl .json)",
            file_types=list(transcripts.EXPORT_TYPES),
        )
        export_path = gr.Textbox(label="…or its path on this machine", elem_id="import-path")
        with gr.Row():
            columns = gr.Textbox(
                label="Column map (optional)", placeholder="ticket=case_no,role=sender,text=body"
            )
            roles = gr.Textbox(label="Role map (optional)", placeholder="Member=user,Rep=assistant")
            held_out = gr.Number(0.1, label="Held out for evaluation", elem_id="import-held-out")
        run = gr.Button("Import and preview", elem_id="import-run")
        report = gr.Markdown(elem_id="import-report")
        shown = gr.Dataframe(
            headers=transcripts.PREVIEW_HEADERS,
            label="First redacted conversations",
            interactive=False,
            wrap=True,
            max_height=300,
        )

        held_out_file = gr.State(None)  # the import's eval.jsonl: ui/app.py hands it to Evaluate

    def on_import_export(upload_file, typed, column_map, role_map, fraction):
        text, rows, train_file, eval_file = transcripts.import_export(
            upload_file, typed, column_map, role_map, fraction
        )
        if train_file is None:
            return text, gr.update(value=None), gr.skip(), gr.skip(), None
        return text, gr.update(value=rows), DATA_SOURCES[2], train_file, eval_file

    event = run.click(
        on_import_export,
        [export, export_path, columns, roles, held_out],
        [report, shown, source, path, held_out_file],
        api_name="import_transcripts",
    )
    return event, held_out_file


def forms_types():
    from ui.views.uploads import UPLOAD_TYPES

    return UPLOAD_TYPES
