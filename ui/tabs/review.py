"""Review tab: ratings of served answers (Chat, Compare, /v1), filtered, corrected, labelled
with an intent, accepted or dropped; the accepted ones exported as training data."""

from __future__ import annotations

import gradio as gr

from feedback.review import STATUSES
from feedback.store import RATINGS
from ui.views import review as view
from ui.views.state import AppState


def build_review_tab(state: AppState) -> dict:
    with gr.Tab("Review", id="review") as tab:
        gr.Markdown(
            "Ratings of served answers (👍/👎 in Chat, Compare's verdicts, `POST /v1/feedback`). "
            "Accept the good ones, fix their corrections, label their intents, and export them as "
            "training data."
        )
        with gr.Row():
            adapter = gr.Dropdown(
                [view.ANY], value=view.ANY, label="Adapter", elem_id="review-adapter"
            )
            rating = gr.Dropdown([view.ANY, *RATINGS], value=view.ANY, label="Rating")
            status = gr.Dropdown(
                [view.ANY, *STATUSES], value="new", label="Status", elem_id="review-status"
            )
            intent = gr.Dropdown(
                [view.ANY],
                value=view.ANY,
                label="Intent",
                allow_custom_value=True,
                elem_id="review-intent",
            )
            since = gr.Textbox(label="From (YYYY-MM-DD)")
            until = gr.Textbox(label="To (YYYY-MM-DD)")
            refresh = gr.Button("↻ Refresh", elem_id="review-refresh")
        day = gr.Markdown("", elem_id="review-day-note")  # a From / To that filters nothing
        rows = gr.Dataframe(
            headers=view.COLUMNS, interactive=False, wrap=True, elem_id="review-table"
        )
        with gr.Row():
            row_id = gr.Textbox(label="Rating id (click a row)", elem_id="review-id")
            correction = gr.Textbox(label="Correction", lines=2, elem_id="review-correction")
            label = gr.Textbox(label="Intent (blank: none)", elem_id="review-label")
        with gr.Row():
            accept = gr.Button("Accept", variant="primary", elem_id="review-accept")
            drop = gr.Button("Drop", elem_id="review-drop")
            save = gr.Button("Save correction", elem_id="review-save")
            save_label = gr.Button("Save intent", elem_id="review-save-intent")
        with gr.Row():
            name = gr.Textbox(value="feedback", label="Dataset name", elem_id="review-name")
            overwrite = gr.Checkbox(
                False,
                label="Overwrite (replace the dataset of that name)",
                elem_id="review-overwrite",
            )
            export = gr.Button("Export accepted as training data", elem_id="review-export")
        said = gr.Markdown("", elem_id="review-said")
        filters = [adapter, rating, status, intent, since, until]

        def show_queue(*chosen):
            return (
                view.table(*chosen),
                gr.update(choices=view.adapters_seen()),
                gr.update(choices=view.intents_seen()),
            )

        def pick(table, evt: gr.SelectData):
            row = table.iloc[evt.index[0]] if hasattr(table, "iloc") else table[evt.index[0]]
            return view.picked(list(row))

        def do(new_status, edit):
            def review_action(rid, text, tag, *chosen):
                try:
                    message = view.act(
                        rid,
                        new_status,
                        text if edit == "correction" else None,
                        tag if edit == "intent" else None,
                    )
                except ValueError as err:
                    gr.Warning(str(err))
                    return gr.skip(), ""
                return view.table(*chosen), message

            return review_action

        def on_export_feedback(stem, replace=False):
            try:
                return view.export_accepted(stem, bool(replace))
            except ValueError as err:
                gr.Warning(str(err))
                return ""

        for trigger in (tab.select, refresh.click):
            trigger(show_queue, filters, [rows, adapter, intent])

        def on_filter(*chosen):
            return view.table(*chosen), view.day_note(*chosen[-2:])

        for box in filters:
            box.change(on_filter, filters, [rows, day])
        rows.select(pick, rows, [row_id, correction, label])
        edits = [row_id, correction, label, *filters]
        accept.click(do("accepted", None), edits, [rows, said])
        drop.click(do("dropped", None), edits, [rows, said])
        save.click(do(None, "correction"), edits, [rows, said])
        save_label.click(do(None, "intent"), edits, [rows, said])
        export.click(on_export_feedback, [name, overwrite], said)
    return {"tab": tab}
