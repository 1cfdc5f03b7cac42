"""What a time budget buys (finetune/train/budget_plan.py): validation sized to the budget, the
steps left after start-up and validation, and the sentences that refuse a budget too short."""

from finetune.train.budget_plan import (
    MIN_USEFUL_STEPS,
    Measured,
    at_batch,
    budget_for,
    estimate,
    fit_batch,
    short_run_note,
    validation_batches,
    verdict,
)


def test_a_validation_pass_takes_the_batches_the_budget_affords():
    # Issue 48: 200 held-out rows (25 batches of 8) at ~11 s a batch on 2 busy cores; a 5-minute
    # budget affords 3 % of 300 s = 9 s a pass: one batch, not 25.
    assert validation_batches(300, 11.0, 25) == 1
    assert validation_batches(300, 0.5, 25) == 18
    assert validation_batches(3600, 0.5, 25) == 25  # a long budget validates on every held-out row
    assert validation_batches(300, 0.5, 0) == 0  # no held-out rows: no pass


def test_a_budget_too_short_is_refused_with_its_figures_and_what_to_change():
    m = Measured(startup_s=80, step_s=9.0, val_batch_s=3.0, val_batches=25)
    e = estimate(300, m)
    # 9 s a pass: 3 batches; base + 3 mid-run (30 s of the 10 % share) + final = 5 passes, 45 s;
    # probes 4 x min(6, 9) = 24 s, save 3 s, margin 3 s, half a step 4.5 s;
    # (300-80-45-34.5) / 9 = 15
    assert (e.val_batches, e.validation_s, e.extras_s, e.steps) == (3, 45.0, 34.5, 15)
    level, sentence = verdict(e, m)
    assert level == "refuse"
    assert sentence.startswith(
        "A 5-minute budget buys about 15 steps here: start-up 80 s, validation 45 s (3 of 25 "
        "validation batches a pass), probe answers, checkpoints and the save 34 s, then 9.0 s a "
        "step. A useful run needs at least 30 steps: give it at least 8 minutes, or lower the "
        "batch size or max length (each step and validation batch takes less)."
    )
    assert (
        estimate(8 * 60, m).steps >= MIN_USEFUL_STEPS > estimate(7 * 60, m).steps
    )  # 8 is the least
    assert budget_for(MIN_USEFUL_STEPS, m) == 8 * 60


def test_a_budget_that_buys_enough_steps_says_how_many():
    m = Measured(startup_s=20, step_s=2.0, val_batch_s=0.5, val_batches=10)
    level, sentence = verdict(estimate(600, m), m)
    assert level == "ok" and sentence.startswith("A 10-minute budget buys about 2")
    assert "all 10 validation batches a pass" in sentence and "useful" not in sentence


def test_the_result_of_a_run_with_too_few_steps_says_so():
    parts = {"startup_s": 79.4, "validation_s": 212.0, "train_s": 16.2}
    assert short_run_note(300, 1, parts) == (
        "the 5-minute budget bought only 1 step, fewer than the 30 a useful run needs (start-up "
        "79 s, validation 212 s, training 16 s, 16.2 s a step): the adapter has barely changed; "
        "give a longer budget, or a smaller batch or max length"
    )
    assert short_run_note(300, 30, parts) == ""


def test_a_smaller_batch_buys_more_steps_of_the_same_rows():
    # The Train tab's first run on a slow 2-core hour: 60 s to start, 17.8 s a step of 8 rows,
    # 7 validation batches of 3 s. A 10-minute budget buys 21 steps of 8, too few.
    m = Measured(startup_s=60, step_s=17.8, val_batch_s=3.0, val_batches=7)
    assert estimate(600, m).steps == 21
    four = at_batch(m, 8, 4)
    assert four == Measured(startup_s=60, step_s=8.9, val_batch_s=1.5, val_batches=14)
    assert at_batch(m, 8, 8) == m and at_batch(m, 8, 3).val_batches == 19  # 56 rows at most
    # 8, 7 and 6 buy 21, 25 and 28 steps; 5 buys 35: the largest that buys 30.
    from_eight = lambda b: at_batch(m, 8, b)  # noqa: E731
    batch, speeds = fit_batch(600, from_eight, 8, 4)
    assert batch == 5 and speeds == at_batch(m, 8, 5)
    assert estimate(600, at_batch(m, 8, 6)).steps < MIN_USEFUL_STEPS <= estimate(600, speeds).steps
    assert fit_batch(1200, from_eight, 8, 4) == (8, m)  # 20 minutes buy enough at 8
    # Too short even at 4: the smallest, whose estimate says how much longer it needs.
    batch, speeds = fit_batch(240, from_eight, 8, 4)
    assert batch == 4 and speeds == four and estimate(240, four).steps < MIN_USEFUL_STEPS
