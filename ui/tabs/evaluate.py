"""Evaluate tab: base and chosen adapters scored on the same rows (BLEU, ROUGE-L, perplexity), and
the support checks (right intent per intent, hand-offs, invented spans, leaks; worst answers first).

Layout and wiring; the tables and text come from ui/views/evaluation.py (no gradio).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from core import paths
from core.user_text import shown_error
from eval.run import evaluate
from inference.generate import GenerationSettings
from ui.views import forms
from ui.views.evaluation import (
    GROUNDING_CHOICES,
    METRIC_COLUMNS,
    OWN_KNOWLEDGE,
    SLICE_CHOICES,
    chosen_knowledge,
    gate_markdown,
    golden_rows,
    grounding_rows,
    knowledge_choices,
    metric_rows,
    picks_after_training,
    report_files,
    run_summary,
    sample_rows,
    slice_cap,
    slice_column,
    slice_table,
    support_intent_rows,
    support_note,
    support_overview,
    worst_answer_rows,
)
from ui.views.state import AppState
from ui.views.train_progress import just_trained
from ui.views.uploads import store_upload, typed_path
from ui.views.wording import as_markdown, for_ui


def build_evaluate_tab(state: AppState, run_id: gr.State | None = None) -> dict:
    """The tab; ``run_id``: the Train tab's current run, whose new adapter it picks to score."""
    run_id = run_id if run_id is not None else gr.State(None)
    with gr.Tab("Evaluate", id="evaluate") as tab:
        with gr.Row():
            adapters = gr.Dropdown(
                [],
                multiselect=True,
                label="Adapters to score against the base model",
                scale=3,
                elem_id="eval-adapters",
            )
            refresh = gr.Button("↻", scale=0, min_width=40)
        with gr.Row():
            data = gr.Textbox(
                forms.DEMO_DATA,
                label="Dataset path (default: the demo data; the adapters' "
                "held-out rows are used when known)",
                scale=3,
                elem_id="eval-data",
            )
            upload = gr.File(
                label="…or upload", file_types=[".jsonl", ".json", ".csv", ".parquet"], scale=1
            )
        with gr.Row():
            samples = gr.Slider(4, 500, value=24, step=1, label="Rows", elem_id="eval-rows")
            max_new = gr.Slider(
                0,
                512,
                value=0,
                step=16,
                elem_id="eval-max-new",
                label="Max new tokens per answer (0 = as long as 95 % of the references)",
            )
            batch = gr.Slider(1, 32, value=8, step=1, label="Prompts per batch")
            golden = gr.Checkbox(True, label="Check the golden prompts", elem_id="eval-golden")
        with gr.Row():
            slice_by = gr.Dropdown(
                SLICE_CHOICES,
                value="intent",
                allow_custom_value=True,
                label="Slice by column (scores and CIs per value; any column of the data)",
                elem_id="eval-slice-by",
            )
            # No minimum: Gradio's own check refused -3 with a bare "Error" (slice_cap says).
            per_slice = gr.Number(
                0,
                precision=0,
                label="Rows per slice (0 = no cap)",
                elem_id="eval-rows-per-slice",
            )
            grounding = gr.Dropdown(
                GROUNDING_CHOICES,
                value=GROUNDING_CHOICES[0],
                elem_id="eval-grounding",
                label="Grounding: answer again from each adapter's knowledge "
                "and report both (auto: when an adapter has knowledge)",
            )
            ground_in = gr.Dropdown(
                [OWN_KNOWLEDGE],
                value=OWN_KNOWLEDGE,
                elem_id="eval-ground-in",
                label="Ground in: each adapter's own knowledge (trained beside it), or a "
                "knowledge base for every model (its newest version, or NAME@vN pinned), as an "
                "alias grounded in it serves them",
            )
        run = gr.Button("Run evaluation", variant="primary", elem_id="eval-run")
        status = gr.Markdown(elem_id="eval-status")
        gate = gr.Markdown(elem_id="eval-gate")
        # The tables stay hidden until a run fills them (an empty one shows columns "1 2 3").
        metrics = gr.Dataframe(
            headers=METRIC_COLUMNS,
            label="Metrics (Δ = adapter − base, paired bootstrap 95% CI)",
            interactive=False,
            wrap=True,
            elem_id="eval-metrics",
            visible=False,
        )
        support = gr.Dataframe(
            label="Support checks: answers addressing the asked intent (a classifier fitted on "
            "the data's labelled answers; its score on the references is the ceiling), "
            "hand-offs, invented spans, leaks",
            interactive=False,
            wrap=True,
            elem_id="eval-support",
            visible=False,
        )
        support_notes = gr.Markdown(elem_id="eval-support-notes")
        grounded = gr.Dataframe(
            label="With and without grounding: right intent, invented spans "
            "(passages shown count as facts), BLEU, ROUGE-L; no "
            "evaluation row is ever shown",
            interactive=False,
            wrap=True,
            elem_id="eval-grounding-rows",
            visible=False,
        )
        # Hidden, as the tables are, until a run gives them an adapter and files.
        which = gr.Dropdown(
            [],
            label="Slice, intent and per-sample tables for adapter",
            elem_id="eval-which",
            visible=False,
        )
        intents = gr.Dataframe(
            label="Right intent per intent, lowest first",
            interactive=False,
            wrap=True,
            max_height=400,
            elem_id="eval-intents",
            visible=False,
        )
        worst = gr.Dataframe(
            label=(
                "Worst answers first: leaks, invented spans (⚠ bold), missed hand-offs, "
                "wrong intent"
            ),
            interactive=False,
            wrap=True,
            max_height=400,
            elem_id="eval-worst",
            datatype="markdown",
            visible=False,
        )
        slices = gr.Dataframe(
            label="By slice: Δ = adapter − base, paired bootstrap 95% CI; worse = beyond chance "
            "over all slices (randomization test, corrected p); worse slices first",
            interactive=False,
            wrap=True,
            max_height=400,
            elem_id="eval-slices",
            visible=False,
        )
        per_sample = gr.Dataframe(
            label="Per-sample scores, worst regressions first",
            interactive=False,
            wrap=True,
            max_height=400,
            elem_id="eval-samples",
            visible=False,
        )
        golden_table = gr.Dataframe(
            label="Golden prompts (must / must-not phrases)",
            interactive=False,
            wrap=True,
            elem_id="eval-golden-table",
            visible=False,
        )
        files = gr.File(
            label="Report files", file_count="multiple", elem_id="eval-files", visible=False
        )
        report_state = gr.State(None)
        offered = gr.State(None)  # the trained adapter this tab has picked once already

        def choices():
            return gr.update(choices=state.adapter_choices())

        def adapters_to_score(picked, current_run, offered_before):
            names = state.adapter_choices()
            trained = just_trained(current_run, names)
            value, now_offered = picks_after_training(picked, names, trained, offered_before)
            return gr.update(choices=names, value=value), now_offered

        def knowledge_to_ground_in(picked):
            names, value = knowledge_choices(picked)
            return gr.update(choices=names, value=value)

        def on_upload(file):
            if not file:
                return gr.update()
            try:
                return store_upload(file)
            except (ValueError, OSError) as err:
                gr.Warning(str(err))
                return gr.update()

        def on_run(
            names,
            path,
            rows,
            n,
            b,
            check_golden,
            column,
            cap,
            ground=GROUNDING_CHOICES[0],
            ground_in=OWN_KNOWLEDGE,
            progress=gr.Progress(),
        ):
            empty = (
                "",
                shown(None),
                shown(None),
                "",
                shown(None),
                gr.update(choices=[], visible=False),
                *[shown(None)] * 5,
                gr.update(value=None, visible=False),
                None,
            )
            if not names:
                return ("Pick at least one adapter.", *empty)
            data_path = typed_path(path) or forms.DEMO_DATA
            try:
                data_path = str(paths.readable(data_path, "the dataset path"))
                column, note = slice_column(column, data_path)
                settings = (
                    GenerationSettings(max_new_tokens=int(n), temperature=0.0)
                    if int(n or 0)
                    else None
                )
                report = evaluate(
                    state.session,
                    list(names),
                    data_path,
                    max_samples=int(rows),
                    batch_size=int(b),
                    settings=settings,
                    golden="assets/golden.jsonl" if check_golden else None,
                    on_progress=lambda f, msg: progress(f, desc=msg),
                    slice_by=column,
                    rows_per_slice=slice_cap(cap, column),
                    grounding=None if ground == GROUNDING_CHOICES[0] else ground,
                    knowledge=chosen_knowledge(ground_in),
                    engine=state.serving.choice,
                )  # who serves Chat (--engine / TUNEDESK_ENGINE): the gate judges its answers
            except (ValueError, OSError) as err:
                said = as_markdown(for_ui(" ".join(shown_error(err).split())))
                return (f"⚠️ {said}", *empty)
            first = report.adapters[0]
            return (
                run_summary(report) + (f"\n\n{note}" if note else ""),
                gate_markdown(report),
                shown(pd.DataFrame(metric_rows(report), columns=METRIC_COLUMNS)),
                _support_table(support_overview(report)),
                support_note(report),
                _support_table(grounding_rows(report)),
                gr.update(choices=report.adapters, value=first, visible=True),
                _intent_table(report, first),
                _worst_table(report, first),
                _slices(report, first),
                _samples(report, first),
                _golden(report),
                gr.update(value=report_files(report), visible=True),
                report,
            )

        def shown(frame):
            """A table's update: ``frame``, visible only when there is one."""
            return gr.update(value=frame, visible=frame is not None)

        def _support_table(found):
            cols, rows = found
            return shown(pd.DataFrame(rows, columns=cols) if rows else None)

        def _intent_table(report, adapter):
            return _support_table(support_intent_rows(report, adapter))

        def _worst_table(report, adapter):
            return _support_table(worst_answer_rows(report, adapter))

        def _slices(report, adapter):
            cols, rows = slice_table(report, adapter)
            return shown(pd.DataFrame(rows, columns=cols) if rows else None)

        def _samples(report, adapter):
            if report is None or not adapter:
                return shown(None)
            cols, rows = sample_rows(report, adapter)
            return shown(pd.DataFrame(rows, columns=cols))

        def _golden(report):
            cols, rows = golden_rows(report)
            return shown(pd.DataFrame(rows, columns=cols) if rows else None)

        tab.select(adapters_to_score, [adapters, run_id, offered], [adapters, offered])
        tab.select(knowledge_to_ground_in, ground_in, ground_in)
        refresh.click(choices, None, adapters, api_name="evaluate_adapters")
        upload.change(on_upload, upload, data)
        run.click(
            on_run,
            [
                adapters,
                data,
                samples,
                max_new,
                batch,
                golden,
                slice_by,
                per_slice,
                grounding,
                ground_in,
            ],
            [
                status,
                gate,
                metrics,
                support,
                support_notes,
                grounded,
                which,
                intents,
                worst,
                slices,
                per_sample,
                golden_table,
                files,
                report_state,
            ],
            api_name="evaluate",
        )
        which.change(_samples, [report_state, which], per_sample)
        which.change(_slices, [report_state, which], slices)
        which.change(_intent_table, [report_state, which], intents)
        which.change(_worst_table, [report_state, which], worst)
    return {"tab": tab, "data": data}
