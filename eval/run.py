"""The paired evaluation: base and adapters answer the same rows, scored in one job.

One model load; every row is tokenized once (by ``eval.scoring_rows``) and the same prompt ids go
to every model. The answers come from the engine ``engine`` names (:mod:`eval.engines`):
llama.cpp's llama-server as it serves, its parallel slots in use, or the session's batched
``generate`` (:mod:`eval.answers`); the report records which. Perplexity is always the
session's, on the same rows' reference answers, base with the adapters disabled. Scores, deltas and
bootstrap CIs are computed in :mod:`eval.report`, which also saves the folder and the manifests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace

from adapters.shelf.store import Shelf
from eval.answers import BASE_LABEL
from eval.checked import section as checked_section
from eval.checks.attach import attach_support
from eval.engines import ENGINES, open_answerer
from eval.gate import check_gates, record_gates
from eval.grounded import check_mode, chosen_knowledge, default_mode
from eval.grounded import section as grounding_section
from eval.judge_run import judge_evaluation
from eval.perplexity import nll_per_row
from eval.report import EvalReport, build_report, save_report, write_back
from eval.scoring_rows import (
    answer_cap,
    check_columns,
    check_slice_column,
    golden_prompt_ids,
    load_golden,
    select_rows,
    training_pairs,
)
from inference.generate import GenerationSettings
from inference.session import ModelSession
from knowledge.grounding import MAX_K

MAX_EVAL_ROWS = 10_000  # rows per evaluation: hours of generation on a CPU already
MAX_EVAL_BATCH = 64  # prompts per generate call (each answered by every model in the call)


def evaluate(
    session: ModelSession,
    adapters: list[str],
    data: str,
    max_samples: int = 100,
    batch_size: int = 8,
    settings: GenerationSettings | None = None,
    use_validation_split: bool = True,
    seed: int = 0,
    golden: str | None = "assets/golden.jsonl",
    on_progress: Callable[[float, str], None] | None = None,
    save: bool = True,
    slice_by: str | None = None,
    rows_per_slice: int | None = None,
    judge=None,
    grounding: str | None = None,
    engine="pytorch",
    passages: int | None = None,
    knowledge: str | None = None,
    columns: dict | None = None,
) -> EvalReport:
    """Answer and score the same rows with the base model and each adapter.

    Args:
        session: a model session on the adapters' base model (loaded here if needed).
        adapters: adapter names on the shelf; the base model is always scored too.
        data: dataset file; by default its rows the adapters did not train on are scored.
        max_samples: at most this many rows.
        batch_size: prompts per generate call (each answered by every model in that call).
        settings: generation settings; default greedy, ``seed``, answers capped at
            :func:`answer_cap` of the scored rows' references.
        use_validation_split: score the adapters' held-out rows if known, else the first rows.
        seed: generation seed (when ``settings`` is None) and bootstrap seed.
        golden: golden prompts JSONL checked for must/must-not phrases; None skips them.
        on_progress: called with (fraction 0-1, message) as the run goes.
        save: write ``$TUNEDESK_HOME/evals/<eval_id>/`` and each adapter's manifest ``eval``
            and release gate verdict ``gate``.
        slice_by: a column of the data (``intent``, ...): every metric and CI again per value.
        rows_per_slice: at most this many rows per value of ``slice_by``.
        judge: an ``eval.judge.JudgeConfig``: an LLM judge grades every answer too, and counts
            in the gate where it agrees with the review queue's ratings (``eval.judge_run``).
        grounding: ``off``, ``on`` or ``both`` (None: ``both`` when an adapter was trained beside
            knowledge): the rows answered again grounded, in ``report.grounding``
            (``eval.grounded``).
        engine: who answers: ``auto`` (llama.cpp where it serves here, else PyTorch, with the
            sentence why), ``llama.cpp`` or ``pytorch`` (:mod:`eval.engines`); or an answerer
            from :func:`eval.engines.open_answerer`, which the caller closes. Perplexity is
            PyTorch's either way.
        passages: passages shown in each grounded prompt (None: what serving shows,
            ``knowledge.grounding.DEFAULT_K``).
        knowledge: ``NAME`` (its newest version) or ``NAME@vN``: every model's grounded
            answers are grounded in that knowledge version, as an alias grounded in it serves
            them (None: each adapter in the one it was trained beside).
        columns: the file's columns by name, ``{"prompt_column": ..., "response_column": ...}``
            (either may be left out; None: the ones the first adapter's run was told where the
            file has them, else found by their names, as training finds them).

    Returns:
        The report (``report.folder`` is where it was saved).

    Raises:
        ValueError: bad arguments, an unknown or mismatched adapter, or unusable data.
    """
    progress = on_progress or (lambda fraction, message: None)
    cap_from_references = settings is None
    settings = settings or GenerationSettings(seed=seed)
    _check_args(session, adapters, max_samples, batch_size, settings, rows_per_slice, engine)
    check_mode(grounding)
    chosen = chosen_knowledge(knowledge, grounding)  # refused before the model loads
    if passages is not None and (not isinstance(passages, int) or not 1 <= passages <= MAX_K):
        raise ValueError(
            f"the passages per grounded answer must be from 1 to {MAX_K}, not {passages!r}"
        )
    golden_rows = load_golden(golden) if golden else []  # a bad file is refused before loading
    check_slice_column(data, slice_by)  # so is a slice column the data does not have
    first = Shelf().get(adapters[0]).manifest if adapters else None
    check_columns(data, columns, first)  # and columns it lacks, or none it can tell apart
    clock = {"start": time.perf_counter()}
    # Rows are chosen with the tokenizer alone, before any progress: data no row of which can
    # be scored is refused in a sentence, not after the weights' loading bars.
    manifests = {name: session.shelf_manifest(name) for name in adapters}
    references, parent_notes = parents_on_shelf(session, manifests)
    for child, parent in list(
        references.items()
    ):  # a parent is scored too, if the session holds it
        if parent not in adapters and len(adapters) >= session.max_loaded_adapters:
            del references[child]
            parent_notes[child] = (
                f"checked against the base: its parent {parent!r} did not fit beside the "
                f"other adapters (at most {session.max_loaded_adapters} at once)"
            )
        elif parent not in adapters:
            adapters = [*adapters, parent]
    manifests.update({p: session.shelf_manifest(p) for p in adapters if p not in manifests})
    rows = select_rows(
        session.load_tokenizer(),
        manifests,
        data,
        max_samples,
        use_validation_split,
        settings.system_prompt or None,
        slice_by,
        rows_per_slice,
        columns,
    )
    if cap_from_references:
        settings = replace(
            settings, max_new_tokens=answer_cap(session.load_tokenizer(), rows.references)
        )
    progress(0.0, "loading the model and adapters")
    session.load()
    for name in adapters:
        session.load_adapter(name)
    clock["rows"] = time.perf_counter()
    answerer = engine
    if isinstance(engine, str):
        progress(0.03, f"starting the answering engine ({engine})")
        answerer = open_answerer(session, engine, adapters, batch_size)
    clock["engine"] = time.perf_counter()
    try:  # the engine stays up for the grounded answers, then stops
        answers, golden_answers = _answer(
            answerer, session, rows, golden_rows, adapters, settings, progress, clock
        )
        nll = _perplexity(session, rows, adapters, batch_size, progress, clock)
        progress(0.95, "scoring")
        report = build_report(rows, answers, nll, golden_rows, golden_answers, seed, references)
        shelf = Shelf()  # the shelf write_back records into
        progress(0.97, "support checks: intent, hand-offs, invented spans")
        attach_support(report, rows, data, shelf, manifests)
        _describe(
            report,
            session,
            adapters,
            data,
            rows,
            settings,
            batch_size=batch_size,
            max_samples=max_samples,
            seed=seed,
            golden=golden,
            slice_by=slice_by,
            use_validation_split=use_validation_split,
            rows_per_slice=rows_per_slice,
        )
        report.settings["engine"] = {
            "name": answerer.name,
            "label": answerer.label,
            "note": answerer.note,
        }
        report.timings = _timings(clock, len(rows.prompts), len(adapters) + 1, len(golden_rows))
        report.timings["support_checks_seconds"] = report.support.get("seconds")
        _grounded(
            report,
            session,
            rows,
            data,
            shelf,
            manifests,
            settings,
            answerer,
            grounding or default_mode(manifests, chosen),
            progress,
            passages,
            chosen,
        )
        report.checked = _checked(report, rows, data, shelf, manifests)
    finally:
        if answerer is not engine:
            answerer.close()

    if judge is not None:  # after the timings: the judge's own seconds are in report.judge
        report.judge = judge_evaluation(report, judge, progress)
    report.gate = check_gates(report, shelf)
    for name, note in [*parent_notes.items(), *untrained_notes(manifests).items()]:
        if name in report.gate:
            report.gate[name]["notes"].append(note)
    if save:
        save_report(report)
        write_back(report)
        record_gates(report, shelf)
    progress(1.0, f"done: {report.folder or 'not saved'}")
    return report


def _grounded(
    report,
    session,
    rows,
    data,
    shelf,
    manifests,
    settings,
    answerer,
    mode,
    progress,
    passages,
    chosen,
) -> None:
    """``report.grounding``: the rows answered again with the knowledge in the prompt, by the
    same engine as the plain answers (not when ``mode`` is off)."""
    if mode == "off":
        return
    progress(0.98, "answering again, grounded in the knowledge shelf")
    start = time.perf_counter()
    tokenizer = session.tokenizer
    report.grounding = grounding_section(
        report,
        rows,
        tokenizer,
        lambda ids, chosen: answerer.answer(ids, chosen, settings),
        data,
        shelf,
        manifests,
        settings,
        mode,
        training_pairs(tokenizer, manifests, data),
        k=passages,
        chosen=chosen,
    )
    report.timings["grounded_seconds"] = round(time.perf_counter() - start, 3)


def _checked(report, rows, data, shelf, manifests) -> dict:
    """``report.checked`` (:mod:`eval.checked`); {} when the support checks could not run."""
    if (report.support or {}).get("error"):
        return {}
    return checked_section(report, rows, data, shelf, manifests, rows.mapping)


def untrained_notes(manifests: dict) -> dict:
    """adapter -> a sentence, for adapters whose run stopped before its first optimizer step.

    Their LoRA B matrices are still zero (PEFT's initialization), so they answer exactly as the
    base model and every score equals the base's: a user who evaluates one should be told, not
    left to read identical rows. Adapters without a step count (imported ones) are not named.
    """
    return {
        name: (
            f"{name} was trained 0 steps (its run stopped before the first optimizer step): its "
            "LoRA update is still zero, so it answers exactly as the base model and every score "
            "here equals the base's"
        )
        for name, manifest in manifests.items()
        if manifest.get("steps") == 0
    }


def parents_on_shelf(session: ModelSession, manifests: dict) -> tuple[dict, dict]:
    """``({adapter: parent}, {adapter: note})``: the version each adapter was tuned from (its
    manifest's ``lineage``), when that very version is still on the shelf; else a note saying
    why its gate is checked against the base instead."""
    parents, notes = {}, {}
    for name, manifest in manifests.items():
        lineage = manifest.get("lineage")
        parent = lineage.get("parent") if isinstance(lineage, dict) else None
        if not parent:
            continue
        try:
            found = session.shelf_hash(parent)
        except ValueError as err:
            notes[name] = (
                f"checked against the base: its parent {parent!r} cannot be loaded ({err})"
            )
            continue
        if lineage.get("parent_hash") and found != lineage["parent_hash"]:
            notes[name] = (
                f"checked against the base: {parent!r} on the shelf is not the version it was "
                "tuned from (trained again since)"
            )
            continue
        parents[name] = parent
    return parents, notes


def _describe(
    report: EvalReport,
    session: ModelSession,
    adapters: list[str],
    data: str,
    rows,
    settings: GenerationSettings,
    **run_settings,
) -> None:
    """What the report was made from: the data, the settings and the weights' hashes."""
    report.data = {
        "path": str(data),
        "rows": len(rows.prompts),
        "held_out": rows.held_out,
        "selection": rows.note,
        "system_prompt": rows.system_prompt,
    }
    report.settings = {
        "generation": asdict(settings),
        **run_settings,
        "device": session.device,
        "dtype": session.dtype,
        "threads": session.threads,
    }
    report.hashes = {
        "base_model": {"name": session.resolved.name, "weight_hash": session.resolved.weight_hash},
        "adapters": {name: session.adapter_hash(name) for name in adapters},
    }


def _answer(answerer, session, rows, golden_rows, adapters, settings, progress, clock):
    """Answers to the rows and golden prompts, for base and each adapter."""
    share = len(rows.prompt_ids) / (len(rows.prompt_ids) + len(golden_rows))
    unit = "batch" if answerer.name == "pytorch" else "answer"

    def gen_progress(lo: float, hi: float):
        return lambda done, total: progress(
            lo + (hi - lo) * done / total, f"generating ({answerer.label}): {unit} {done}/{total}"
        )

    answers = answerer.answer(
        rows.prompt_ids, adapters, settings, gen_progress(0.05, 0.05 + 0.7 * share)
    )
    clock["generate"] = time.perf_counter()
    golden_ids = golden_prompt_ids(session.tokenizer, golden_rows, rows.system_prompt)
    golden_answers = answerer.answer(
        golden_ids, adapters, settings, gen_progress(0.05 + 0.7 * share, 0.75)
    )
    clock["golden"] = time.perf_counter()
    return answers, golden_answers


def _perplexity(session, rows, adapters, batch_size, progress, clock) -> dict:
    """Per-row NLL of the reference answers, for base and each adapter (PyTorch)."""
    nll = {}
    for k, label in enumerate([BASE_LABEL, *adapters]):
        progress(0.75 + 0.2 * k / (len(adapters) + 1), f"perplexity: {label}")
        nll[label] = row_nll(
            session, None if label == BASE_LABEL else label, rows.examples, batch_size
        )
    clock["perplexity"] = time.perf_counter()
    return nll


def _check_args(
    session, adapters, max_samples, batch_size, settings, rows_per_slice, engine
) -> None:
    problems = settings.validate()
    if isinstance(engine, str) and engine not in ENGINES:
        problems.append(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if rows_per_slice is not None and (
        not isinstance(rows_per_slice, int)
        or isinstance(rows_per_slice, bool)
        or rows_per_slice < 1
    ):
        problems.append(
            f"rows_per_slice must be a whole number of at least 1, got {rows_per_slice!r}"
        )
    for label, value, most in (
        ("max_samples", max_samples, MAX_EVAL_ROWS),
        ("batch_size", batch_size, MAX_EVAL_BATCH),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            problems.append(f"{label} must be a whole number from 1 to {most}, got {value!r}")
    if len(set(adapters)) != len(adapters):
        problems.append(f"an adapter is named twice: {adapters}")
    if BASE_LABEL in adapters:
        problems.append(f"{BASE_LABEL!r} is always evaluated; it cannot be an adapter name")
    if len(adapters) > session.max_loaded_adapters:
        problems.append(
            f"{len(adapters)} adapters, but the session holds at most "
            f"{session.max_loaded_adapters} at once"
        )
    if problems:
        raise ValueError("cannot evaluate: " + "; ".join(problems))


def _timings(clock: dict, rows: int, models: int, golden: int) -> dict:
    total = time.perf_counter() - clock["start"]
    gen = clock["generate"] - clock["engine"]
    return {
        "rows_seconds": round(clock["rows"] - clock["start"], 3),
        "engine_start_seconds": round(clock["engine"] - clock["rows"], 3),
        "generate_seconds": round(gen, 3),
        "golden_seconds": round(clock["golden"] - clock["generate"], 3),
        "perplexity_seconds": round(clock["perplexity"] - clock["golden"], 3),
        "total_seconds": round(total, 3),
        # rows/s: dataset rows fully evaluated (every model answered and scored) per second.
        "rows_per_second": round(rows / total, 4),
        "answers_per_second": round(rows * models / max(gen, 1e-9), 4),
        "golden_prompts": golden,
    }


def row_nll(
    session: ModelSession, adapter: str | None, examples: list[dict], batch_size: int = 8
) -> dict:
    """Per-row summed NLL of the response tokens of ``adapter`` (None: the base model), so the
    bootstrap can resample rows (:func:`eval.perplexity.nll_per_row`)."""
    with session.use(adapter) as model:
        return nll_per_row(model, examples, batch_size, session.tokenizer.pad_token_id)
