"""bench gate-false-alarm: the simulation the gate's statistics are documented with."""

from __future__ import annotations

import numpy as np

from bench.gate_false_alarm import main, one_evaluation


def test_a_regression_in_every_slice_is_caught_with_too_few_rows_to_flag_one_alone():
    """No 7-row slice can be flagged alone among 54 checks (best p 1/128 > 2.5 % / 54), but 27 of
    them worse together pass Benjamini-Hochberg's 27th threshold (27 x 2.5 % / 54 = 1.25 %)."""
    worse_everywhere = one_evaluation(
        np.random.default_rng(0), slices=27, rows=7, worse=27, shift=0.6, seed=0
    )
    assert worse_everywhere[1] and worse_everywhere[2] == 27
    one_worse = one_evaluation(
        np.random.default_rng(0), slices=27, rows=7, worse=1, shift=0.6, seed=0
    )
    assert (
        one_worse[0] and not one_worse[1]
    )  # the old rule flags something, as in most null evaluations


def test_the_command_prints_both_rules_rates(capsys):
    assert main(["--slices", "4", "--rows", "6", "--evaluations", "3"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(
        "3 evaluations, 4 slices x 6 rows x 2 metrics, 0 slice(s) truly worse: the old rule "
        "flagged "
    )
