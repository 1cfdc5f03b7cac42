"""The loss-curve value handed to Gradio's LinePlot (the browser tests check what it draws)."""

from __future__ import annotations

import math

import gradio as gr

from ui.views.train_progress import CURVE_SERIES, curve_frame


def _plotted(frame):
    """What the LinePlot sends to the browser for ``frame``."""
    return gr.LinePlot(x="step", y="loss", color="series").postprocess(frame)


def test_the_first_value_already_names_both_series_as_categories():
    sent = _plotted(curve_frame([]))
    assert sent.datatypes["series"] == "nominal"  # a numeric colour scale draws no lines
    series = {row[sent.columns.index("series")] for row in sent.data}
    assert series == set(CURVE_SERIES)


def test_real_points_keep_their_values_and_the_blank_rows_are_not_drawable():
    points = [{"step": 1, "loss": 2.5, "series": "train"}, {"step": 2, "loss": 2.1, "series": "train"}]
    frame = curve_frame(points)
    real = frame[frame["loss"].notna()]
    assert real.to_dict("records") == points
    blank = frame[frame["loss"].isna()]
    assert sorted(blank["series"]) == sorted(CURVE_SERIES)
    sent = _plotted(frame)
    assert sent.datatypes["step"] == sent.datatypes["loss"] == "quantitative"
    losses = [row[sent.columns.index("loss")] for row in sent.data]
    assert sum(1 for v in losses if v is None or (isinstance(v, float) and math.isnan(v))) == len(CURVE_SERIES)
