"""`python -m eval`: score adapters against their base model on the same rows.

    python -m eval --adapter NAME [--adapter NAME2] --data FILE --max-samples N
        [--prompt-column COLUMN --response-column COLUMN]
        [--engine auto|llama.cpp|pytorch]
        [--slice-by intent [--rows-per-slice K]]
        [--judge-url URL --judge-model NAME [--judge-key KEY] [--judge-review-rows N]]
    python -m eval judge-check --judge-url URL --judge-model NAME [--rows N]

Prints BLEU, ROUGE-L, perplexity and golden passes for the base and each adapter, with the
deltas vs base and their 95 % CIs, the same per slice with the slices where an adapter is
worse flagged, the support checks (right-intent rate beside the classifier's ceiling, per
intent too; hand-offs both ways; invented spans; leaks), each adapter's release gate verdict
with its floors' figures, and where the report was saved. With a judge (any
OpenAI-compatible endpoint, eval/judge.py), each answer's grades and the judge's agreement with
the review queue's human ratings too; ``judge-check`` measures that agreement alone. Bad
input (an unknown adapter, a missing data file, adapters of different base models, a column
named or sliced by that the data does not have, a corrupt gate.json) is one ``error:`` line
and exit status 2, or, for gate.json, one line saying the gate was not evaluated.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from core.cli import BAD_INPUT, guarded
from knowledge.grounding import DEFAULT_K, MAX_K

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
COLUMN_FLAGS = ("--prompt-column", "--response-column")


def build_parser() -> argparse.ArgumentParser:
    from core.cli import DefaultsFormatter

    p = argparse.ArgumentParser(prog="python -m eval", description=__doc__.splitlines()[0])
    p.formatter_class = DefaultsFormatter  # each flag's default in --help
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME",
        help="adapter on the shelf; repeat to score several",
    )
    p.add_argument("--data", required=True, help="dataset file (held-out rows are used when known)")
    from finetune.commands.train_flags import add_flag

    for flag in COLUMN_FLAGS:  # as python -m finetune train takes them
        add_flag(p, flag, dest=flag[2:].replace("-", "_"))
    p.add_argument("--max-samples", type=int, default=100, help="rows to score (default 100)")
    p.add_argument(
        "--batch-size", type=int, default=8, help="prompts per generate call (default 8)"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="answer length cap (default: as long as 95 %% of the scored references, 32-512)",
    )
    p.add_argument("--base", help="base model (default: the adapters' manifest base_model.name)")
    p.add_argument("--no-golden", action="store_true", help="skip the golden prompts")
    p.add_argument("--golden", default="assets/golden.jsonl", help="golden prompts JSONL")
    p.add_argument(
        "--first-rows",
        action="store_true",
        help="score the first rows of the file, not the adapters' held-out rows",
    )
    p.add_argument(
        "--slice-by",
        metavar="COLUMN",
        help="score every slice of this data column too (e.g. intent, category; default: none)",
    )
    p.add_argument(
        "--rows-per-slice",
        type=int,
        metavar="K",
        help="with --slice-by: at most K rows of each slice (a few of every intent; "
        "default: every row)",
    )
    p.add_argument("--seed", type=int, default=0, help="generation and bootstrap seed")
    p.add_argument(
        "--grounding",
        choices=("off", "on", "both"),
        default=None,
        help="answer the rows again grounded in each adapter's knowledge (the passages "
        "it was trained beside) and report both: off, on (grounded rows only), "
        "both (default when an adapter has knowledge, else off)",
    )
    p.add_argument(
        "--knowledge",
        metavar="NAME[@vN]",
        default=None,
        help="ground every model's answers in this knowledge base (its newest version, or "
        "NAME@vN), as an alias grounded in it serves them; the release gate then judges "
        "them so (default: each adapter in the knowledge it was trained beside)",
    )
    p.add_argument(
        "--passages",
        type=int,
        metavar="K",
        default=None,
        help=f"grounded answers: passages shown at most in each prompt, 1 to {MAX_K} "
        f"(default {DEFAULT_K}, as Chat and /v1 show)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "llama.cpp", "pytorch"),
        help="who answers: auto (default: llama-server as Chat serves, where it is built "
        "and the adapters convert; else PyTorch), llama.cpp or pytorch; perplexity "
        "is PyTorch's either way",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads (default 0: one per physical core); fewer on a busy machine",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    from eval.judge_check import DESCRIPTION, add_judge_arguments

    p.epilog = (
        f"commands: judge-check: {DESCRIPTION}, with no model loaded "
        "(python -m eval judge-check --help)"
    )

    add_judge_arguments(p)
    p.add_argument(
        "--judge-review-rows",
        type=int,
        default=50,
        metavar="N",
        help="with a judge: also grade N human-rated review-queue answers, for its agreement "
        "with people (default 50)",
    )
    return p


def base_model_of(adapters: list[str]) -> str:
    """The base model all ``adapters`` were trained on, from their manifests.

    Raises:
        ValueError: an unknown or broken adapter, or adapters of different base models.
    """
    from adapters.shelf.store import Shelf

    shelf, bases = Shelf(), {}
    for name in adapters:
        base = shelf.base_of(name)
        bases[name] = (base["name"], base["weight_hash"])
    if len({b[0] for b in bases.values()}) > 1 or len({b[1] for b in bases.values()}) > 1:
        listed = ", ".join(f"{n} -> {b[0]} ({b[1] or 'no hash'})" for n, b in bases.items())
        raise ValueError(
            f"the adapters were trained on different base models ({listed}); "
            "evaluate them in separate runs"
        )
    return next(iter(bases.values()))[0]


def column_settings(args) -> dict | None:
    """``--prompt-column`` / ``--response-column`` as :func:`eval.run.evaluate`'s ``columns``
    (None: neither given); :func:`eval.scoring_rows.check_columns` checks them against the
    file as training checks its own (:func:`finetune.data.detect_mapping`)."""
    given = {f: getattr(args, f) for f in ("prompt_column", "response_column")}
    return {f: v for f, v in given.items() if v is not None} or None


def _check_data(data: str) -> None:
    p = Path(data).expanduser()
    if not p.exists() and not (_HUB_ID.match(data) and not p.suffix):
        raise FileNotFoundError(f"data file {data} does not exist")


def run(args) -> int:
    from eval.gate import gate_lines
    from eval.report import engine_line, metrics_table
    from eval.run import evaluate
    from inference.generate import GenerationSettings
    from inference.session import ModelSession

    if not args.adapter and not args.base:
        raise ValueError("name at least one --adapter (or --base to score the base model alone)")
    if args.rows_per_slice is not None and not args.slice_by:
        raise ValueError("--rows-per-slice needs --slice-by COLUMN")
    if args.threads < 0:
        raise ValueError(f"--threads must be 0 (all cores) or more, not {args.threads}")
    _check_data(args.data)
    from core.hardware import detect

    detect().device(args.device)  # a device this machine lacks, refused before the model loads
    from eval.judge_check import judge_config

    judge = judge_config(args)  # bad judge settings are refused before the model loads
    from adapters.shelf.store import Shelf
    from eval.scoring_rows import check_columns, check_slice_column

    columns = column_settings(args)
    first = Shelf().get(args.adapter[0]).manifest if args.adapter else None
    check_columns(args.data, columns, first)  # before the model loads
    check_slice_column(args.data, args.slice_by)
    base = args.base or base_model_of(args.adapter)
    settings = None  # answers as long as the references (eval.run.answer_cap)
    if args.max_new_tokens is not None:
        settings = GenerationSettings(max_new_tokens=args.max_new_tokens, seed=args.seed)
        settings.check()
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)  # the session uses at most this many
    from eval.run import untrained_notes

    for note in untrained_notes(
        {name: Shelf().get(name).manifest for name in args.adapter}
    ).values():
        print(f"warning: {note}", file=sys.stderr)  # before the minutes of answering, not after
    session = ModelSession(base, device=args.device, max_loaded_adapters=max(4, len(args.adapter)))
    bar = _progress_bar(args.quiet)
    try:
        report = evaluate(
            session,
            args.adapter,
            args.data,
            max_samples=args.max_samples,
            batch_size=args.batch_size,
            settings=settings,
            use_validation_split=not args.first_rows,
            seed=args.seed,
            golden=None if args.no_golden else args.golden,
            on_progress=bar.update if bar else None,
            slice_by=args.slice_by,
            rows_per_slice=args.rows_per_slice,
            judge=judge,
            grounding=args.grounding,
            passages=args.passages,
            knowledge=args.knowledge,
            engine=args.engine,
            columns=columns,
        )
    finally:
        if bar:
            bar.close()
    print(
        f"{report.data['rows']} rows of {report.data['path']}: {report.data['selection']}; "
        f"answers of at most {report.settings['generation']['max_new_tokens']} tokens"
    )
    print(engine_line(report))
    print(metrics_table(report))
    print(
        f"{report.timings['rows_per_second']} rows/s ({report.timings['total_seconds']} s); "
        f"deltas are adapter - base with paired-bootstrap 95% CIs"
    )
    for adapter in report.adapters if report.slices else []:
        print(slice_summary(report.slices, adapter))
    print(support_summary(report))
    if report.grounding:
        from eval.grounded import lines as grounding_lines

        print("\n".join(grounding_lines(report.grounding)))
    if report.checked:
        from eval.checked import lines as checked_lines

        print("\n".join(checked_lines(report.checked)))
    for line in gate_lines(report):
        print(line)
    from eval.judge_gate import judge_lines

    for line in judge_lines(report.judge, report.gate):
        print(line)
    print(f"report: {report.folder}")
    return 0


def support_summary(report) -> str:
    """The support checks: one line per model, then each adapter's intents, lowest first."""
    from eval.checks.tables import markdown, per_intent

    lines = [
        "support checks (right intent by a classifier fitted on the data's labelled answers; "
        "hand-offs; invented spans; leaks):",
        markdown(report.support),
    ]
    for adapter in report.adapters:
        cols, rows = per_intent(report.support, adapter)
        if rows:
            lines += [
                f"{adapter} by intent, lowest right-intent rate first:",
                "| " + " | ".join(cols) + " |",
                "|" + "---|" * len(cols),
            ]
            lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def slice_summary(slices: dict, adapter: str) -> str:
    """The slice table, narrow enough for a terminal: deltas with CIs, golden, worse, note."""
    from eval.slices import flagged, table

    cols, rows = table(slices, adapter)
    keep = [0, 1, 4, 7, 10, 11, 12, 13]
    lines = [
        f"{adapter} by {slices['column']}: {len(rows)} slices, {len(flagged(slices, adapter))} "
        "worse than base beyond chance (corrected over all slices)",
        "| " + " | ".join(cols[k] for k in keep) + " |",
        "|" + "---|" * len(keep),
    ]
    lines += ["| " + " | ".join(str(r[k]) for k in keep) + " |" for r in rows]
    return "\n".join(lines)


class _Bar:
    """Adapts ``on_progress(fraction, message)`` to a tqdm bar counting percent, drawn from the
    first progress on: the evaluation's own checks refuse bad settings before any, so their
    sentence is not printed under an empty bar."""

    def __init__(self):
        self.tqdm = None

    def update(self, fraction: float, message: str) -> None:
        if self.tqdm is None:
            from tqdm import tqdm

            self.tqdm = tqdm(total=100, unit="%", file=sys.stderr, dynamic_ncols=True)
        self.tqdm.set_description_str(message[:40])
        self.tqdm.update(max(0, round(100 * fraction) - self.tqdm.n))

    def close(self) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def _progress_bar(quiet: bool) -> _Bar | None:
    return None if quiet else _Bar()


def main(argv: list[str] | None = None) -> int:
    """``python -m eval``: its exit code (2: bad input; 1: an internal error, traced in a log)."""
    return guarded(lambda: _main(sys.argv[1:] if argv is None else argv), "python -m eval")


def _main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["judge-check"]:  # the judge against the review queue alone, no model
            from eval.judge_check import main as judge_check

            return judge_check(argv[1:])
        return run(build_parser().parse_args(argv))
    except BAD_INPUT as err:  # FileNotFoundError and the data/adapter errors
        message = " ".join(str(err).split())
        print(f"error: {as_flags(message)}", file=sys.stderr)
        return 2


# evaluate()'s own checks name its parameters; here the user gave them as these flags
FLAG_OF = {
    "max_samples": "--max-samples",
    "batch_size": "--batch-size",
    "max_new_tokens": "--max-new-tokens",
    "rows_per_slice": "--rows-per-slice",
}
_PARAMETER = re.compile(r"\b(" + "|".join(FLAG_OF) + r")\b")


def as_flags(message: str) -> str:
    """``message`` with each evaluation parameter it names written as its flag."""
    return _PARAMETER.sub(lambda m: FLAG_OF[m.group(1)], message)


if __name__ == "__main__":
    from core.optional_imports import keep_bitsandbytes_out

    keep_bitsandbytes_out()  # evaluation quantizes nothing: 1.3-1.5 s less at each start
    sys.exit(main())
