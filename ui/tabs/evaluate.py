"""Evaluate tab: base and chosen adapters scored on the same rows (BLEU, ROUGE-L, perplexity), and
the support checks (right intent per intent, hand-offs, invented spans, leaks; worst answers first).

Layout and wiring; the tables and text come from ui/views/evaluation.py (no gradio).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from eval.run import evaluate
from inference.generate import GenerationSettings
from ui.views import forms
from ui.views.evaluation import (
    METRIC_COLUMNS,
    SLICE_CHOICES,
    gate_markdown,
    golden_rows,
    metric_rows,
    report_files,
    run_summary,
    sample_rows,
    slice_column,
    slice_table,
    support_intent_rows,
    support_note,
    support_overview,
    worst_answer_rows,
)
from ui.views.state import AppState, store_upload


def build_evaluate_tab(state: AppState) -> dict:
    with gr.Tab("Evaluate", id="evaluate") as tab:
        with gr.Row():
            adapters = gr.Dropdown([], multiselect=True, label="Adapters to score against the base model",
                                   scale=3, elem_id="eval-adapters")
            refresh = gr.Button("↻", scale=0, min_width=40)
        with gr.Row():
            data = gr.Textbox(forms.DEMO_DATA, label="Dataset path (default: the demo data; the adapters' "
                              "held-out rows are used when known)", scale=3, elem_id="eval-data")
            upload = gr.File(label="…or upload", file_types=[".jsonl", ".json", ".csv", ".parquet"], scale=1)
        with gr.Row():
            samples = gr.Slider(4, 500, value=24, step=1, label="Rows", elem_id="eval-rows")
            max_new = gr.Slider(0, 512, value=0, step=16, elem_id="eval-max-new",
                                label="Max new tokens per answer (0 = as long as 95 % of the references)")
            batch = gr.Slider(1, 32, value=8, step=1, label="Prompts per batch")
            golden = gr.Checkbox(True, label="Check the golden prompts", elem_id="eval-golden")
        with gr.Row():
            slice_by = gr.Dropdown(SLICE_CHOICES, value="intent", allow_custom_value=True,
                                   label="Slice by column (scores and CIs per value; any column of the data)",
                                   elem_id="eval-slice-by")
            per_slice = gr.Number(0, precision=0, minimum=0, label="Rows per slice (0 = no cap)",
                                  elem_id="eval-rows-per-slice")
        run = gr.Button("Run evaluation", variant="primary", elem_id="eval-run")
        status = gr.Markdown(elem_id="eval-status")
        gate = gr.Markdown(elem_id="eval-gate")
        metrics = gr.Dataframe(headers=METRIC_COLUMNS, label="Metrics (Δ = adapter − base, paired bootstrap 95% CI)",
                               interactive=False, wrap=True, elem_id="eval-metrics")
        support = gr.Dataframe(label="Support checks: answers addressing the asked intent (a classifier fitted on "
                                     "the data's labelled answers; its score on the references is the ceiling), "
                                     "hand-offs, invented spans, leaks", interactive=False, wrap=True,
                               elem_id="eval-support")
        support_notes = gr.Markdown(elem_id="eval-support-notes")
        which = gr.Dropdown([], label="Slice, intent and per-sample tables for adapter")
        intents = gr.Dataframe(label="Right intent per intent, lowest first", interactive=False, wrap=True,
                               max_height=400, elem_id="eval-intents")
        worst = gr.Dataframe(label="Worst answers first: leaks, invented spans (⚠ bold), missed hand-offs, wrong intent",
                             interactive=False, wrap=True, max_height=400, elem_id="eval-worst",
                             datatype="markdown")
        slices = gr.Dataframe(label="By slice: Δ = adapter − base, paired bootstrap 95% CI; worse = beyond chance "
                                    "over all slices (randomization test, corrected p); worse slices first",
                              interactive=False, wrap=True, max_height=400, elem_id="eval-slices")
        per_sample = gr.Dataframe(label="Per-sample scores, worst regressions first", interactive=False,
                                  wrap=True, max_height=400, elem_id="eval-samples")
        golden_table = gr.Dataframe(label="Golden prompts (must / must-not phrases)", interactive=False, wrap=True)
        files = gr.File(label="Report files", file_count="multiple", elem_id="eval-files")
        report_state = gr.State(None)

        def choices():
            return gr.update(choices=state.adapter_choices())

        def on_upload(file):
            if not file:
                return gr.update()
            try:
                return store_upload(file)
            except (ValueError, OSError) as err:
                gr.Warning(str(err))
                return gr.update()

        def on_run(names, path, rows, n, b, check_golden, column, cap, progress=gr.Progress()):
            empty = ("", None, None, "", gr.update(choices=[]), None, None, None, None, None, None, None)
            if not names:
                return ("Pick at least one adapter.", *empty)
            data_path = (path or forms.DEMO_DATA).strip()
            try:
                column, note = slice_column(column, data_path)
                settings = GenerationSettings(max_new_tokens=int(n), temperature=0.0) if int(n or 0) else None
                report = evaluate(state.session, list(names), data_path,
                                  max_samples=int(rows), batch_size=int(b), settings=settings,
                                  golden="assets/golden.jsonl" if check_golden else None,
                                  on_progress=lambda f, msg: progress(f, desc=msg),
                                  slice_by=column, rows_per_slice=int(cap) if cap and column else None,
                                  engine="auto")  # llama-server as Chat serves, where it is built
            except (ValueError, OSError) as err:
                return (f"⚠️ {' '.join(str(err).split())}", *empty)
            first = report.adapters[0]
            return (run_summary(report) + (f"\n\n{note}" if note else ""), gate_markdown(report),
                    pd.DataFrame(metric_rows(report), columns=METRIC_COLUMNS),
                    _support_table(support_overview(report)), support_note(report),
                    gr.update(choices=report.adapters, value=first), _support_table(support_intent_rows(report, first)),
                    _support_table(worst_answer_rows(report, first)), _slices(report, first),
                    _samples(report, first), _golden(report), report_files(report), report)

        def _support_table(found):
            cols, rows = found
            return pd.DataFrame(rows, columns=cols) if rows else None

        def _intent_table(report, adapter):
            return _support_table(support_intent_rows(report, adapter))

        def _worst_table(report, adapter):
            return _support_table(worst_answer_rows(report, adapter))

        def _slices(report, adapter):
            cols, rows = slice_table(report, adapter)
            return pd.DataFrame(rows, columns=cols) if rows else None

        def _samples(report, adapter):
            if report is None or not adapter:
                return None
            cols, rows = sample_rows(report, adapter)
            return pd.DataFrame(rows, columns=cols)

        def _golden(report):
            cols, rows = golden_rows(report)
            return pd.DataFrame(rows, columns=cols) if rows else None

        tab.select(choices, None, adapters)
        refresh.click(choices, None, adapters, api_name="evaluate_adapters")
        upload.change(on_upload, upload, data)
        run.click(on_run, [adapters, data, samples, max_new, batch, golden, slice_by, per_slice],
                  [status, gate, metrics, support, support_notes, which, intents, worst, slices, per_sample,
                   golden_table, files, report_state],
                  api_name="evaluate")
        which.change(_samples, [report_state, which], per_sample)
        which.change(_slices, [report_state, which], slices)
        which.change(_intent_table, [report_state, which], intents)
        which.change(_worst_table, [report_state, which], worst)
    return {"tab": tab, "data": data}
