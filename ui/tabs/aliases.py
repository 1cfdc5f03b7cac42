"""The Adapters tab's aliases section: set a split, promote, roll back, and watch each
version's live figures (layout and wiring only; what the controls do is ui/views/aliases.py)."""

from __future__ import annotations

import gradio as gr

from ui.views import aliases as view
from ui.views.state import AppState

HELP = (
    'An alias is one model name for clients (`model: "support-bot"`) over weighted versions. '
    "New conversations go to a version by weight and stay on it; a version at 0 finishes its own. "
    "Only a version whose release gate passed gains traffic, unless you override with a reason. "
    "Every change is logged in the store's audit; **Roll back** undoes the last one."
)
AUTO_HELP = (
    "**Automatic rollback** (margin 0: off): the server takes a canary out, its traffic back to "
    "the version with the largest weight, when the canary's error rate or thumbs-down rate since "
    "the split exceeds that version's by more than the margin, once both have the minimum "
    "requests (ratings)."
)


def build_aliases_section(state: AppState) -> None:
    """The section, inside the Adapters tab."""
    with gr.Accordion("Aliases: one model name, canary traffic, rollback", open=False):
        gr.Markdown(HELP)
        with gr.Row():
            alias = gr.Dropdown([], label="Alias", allow_custom_value=True, elem_id="alias-name")
            split = gr.Textbox(
                label="Split: VERSION=WEIGHT …, summing to 100",
                placeholder="support-v3=90 support-v4=10",
                elem_id="alias-split",
            )
            version = gr.Dropdown(
                [], label="Version to promote", allow_custom_value=True, elem_id="alias-version"
            )
        with gr.Row():
            force = gr.Checkbox(label="Override the release gate", elem_id="alias-force")
            reason = gr.Textbox(
                label="Reason for the override (kept in the audit log)", elem_id="alias-reason"
            )
        margin, min_requests, min_ratings, apply_auto = _auto_rollback_row()
        with gr.Row():
            grounding = gr.Dropdown(
                view.grounding_choices(),
                value="auto",
                allow_custom_value=True,
                label="Grounding: auto (each version's own knowledge), off, "
                "or a knowledge base (NAME or NAME@vN)",
                elem_id="alias-grounding",
            )
            apply_grounding = gr.Button("Apply grounding", elem_id="alias-grounding-apply")
            check = gr.Radio(
                ["off", "on"],
                value="off",
                label="Check each answer before it is sent (the intent asked against the "
                "intent answered)",
                elem_id="alias-check",
            )
            apply_check = gr.Button("Apply check", elem_id="alias-check-apply")
        with gr.Row():
            set_split = gr.Button("Set split", variant="primary", elem_id="alias-set")
            promote = gr.Button("Promote version", elem_id="alias-promote")
            rollback = gr.Button("Roll back", elem_id="alias-rollback")
            delete = gr.Button("Delete alias", variant="stop", elem_id="alias-delete")
            refresh = gr.Button("↻ Refresh", elem_id="alias-refresh")
        said = gr.Markdown(elem_id="alias-said")
        about = gr.Markdown(elem_id="alias-details")
        table = gr.Dataframe(headers=view.COLUMNS, interactive=False, elem_id="alias-stats")
        metric = gr.Radio(
            list(view.METRICS),
            value="answer p95 (s)",
            label=f"Plot, per {view.plot_bucket_s():g} s",
            elem_id="alias-metric",
        )
        plot = gr.LinePlot(x="time", y="value", color="version", elem_id="alias-plot", height=260)
        timer = gr.Timer(10)

        def refresh_aliases(name, chosen_metric):
            names = view.names()
            name = name or (names[0] if names else None)  # a name typed for a new alias stays
            return (
                gr.update(choices=names, value=name),
                gr.update(choices=state.adapter_choices()),
                view.details(name),
                *alias_figures(name, chosen_metric),
                *view.policy_fields(name),
                gr.update(choices=view.grounding_choices(), value=view.grounding_value(name)),
                view.check_value(name),
            )

        def alias_figures(name, chosen_metric):
            return (
                view.figures(state.alias_stats, name, state.serving),
                view.plot_frame(state.alias_stats, name, chosen_metric, engines=state.serving),
            )

        def on_alias_auto_rollback(
            name, chosen_margin, requests, ratings, request: gr.Request = None
        ):
            by = f"{getattr(request, 'username', None) or 'page'} (ui)"
            return view.set_policy(name, chosen_margin, requests, ratings, by)

        def on_alias_grounding(name, chosen, override, why, request: gr.Request = None):
            by = f"{getattr(request, 'username', None) or 'page'} (ui)"
            return view.set_grounding(name, chosen, by, override, why)

        def on_alias_check(name, chosen, request: gr.Request = None):
            by = f"{getattr(request, 'username', None) or 'page'} (ui)"
            return view.set_check(name, chosen, by)

        def acting(action):
            def act(name, typed_split, chosen, override, why, request: gr.Request = None):
                by = f"{getattr(request, 'username', None) or 'page'} (ui)"
                return view.change(action, name, typed_split, chosen, override, why, by)

            act.__name__ = f"on_alias_{action}"  # the tests call each by name
            return act

        inputs = [alias, split, version, force, reason]
        shown = [
            alias,
            version,
            about,
            table,
            plot,
            margin,
            min_requests,
            min_ratings,
            grounding,
            check,
        ]
        for button, action in (
            (set_split, "set"),
            (promote, "promote"),
            (rollback, "rollback"),
            (delete, "delete"),
        ):
            button.click(acting(action), inputs, said).then(refresh_aliases, [alias, metric], shown)
        apply_auto.click(
            on_alias_auto_rollback, [alias, margin, min_requests, min_ratings], said
        ).then(refresh_aliases, [alias, metric], shown)
        apply_grounding.click(on_alias_grounding, [alias, grounding, force, reason], said).then(
            refresh_aliases, [alias, metric], shown
        )
        apply_check.click(on_alias_check, [alias, check], said).then(
            refresh_aliases, [alias, metric], shown
        )
        refresh.click(refresh_aliases, [alias, metric], shown)
        alias.change(refresh_aliases, [alias, metric], shown)
        metric.change(alias_figures, [alias, metric], [table, plot])
        timer.tick(alias_figures, [alias, metric], [table, plot], show_progress="hidden")


def _auto_rollback_row():
    """The automatic rollback's settings and its button: (margin, min requests, min
    ratings, button)."""
    gr.Markdown(AUTO_HELP)
    with gr.Row():
        # No minimum / maximum: Gradio's own check refused a value with a bare "Error"; the
        # alias rules say what is allowed.
        margin = gr.Number(
            0,
            label="Auto-rollback margin (0.1 = ten points; 0: off)",
            step=0.05,
            elem_id="alias-auto-margin",
        )
        min_requests = gr.Number(
            50, label="Minimum requests", precision=0, elem_id="alias-auto-requests"
        )
        min_ratings = gr.Number(
            10, label="Minimum ratings", precision=0, elem_id="alias-auto-ratings"
        )
        apply_auto = gr.Button("Apply automatic rollback", elem_id="alias-auto-apply")
    return margin, min_requests, min_ratings, apply_auto
