"""Tables and text for the Evaluate tab from an EvalReport. No gradio here."""

from __future__ import annotations

from pathlib import Path

METRIC_COLUMNS = [
    "model",
    "BLEU",
    "ROUGE-L",
    "perplexity",
    "golden passed",
    "Δ BLEU [95% CI]",
    "Δ ROUGE-L [95% CI]",
    "Δ perplexity [95% CI]",
]
GROUNDING_CHOICES = ["auto", "off", "on", "both"]  # auto: both when an adapter has knowledge
OWN_KNOWLEDGE = "each adapter's own"  # the knowledge version it was trained beside


def knowledge_choices(picked: str | None) -> tuple[list[str], str]:
    """The "Ground in" dropdown's choices (each adapter's own, then every knowledge base: its
    newest version, then each version pinned, ``NAME@vN``, as an alias may serve it) and its
    value: ``picked`` while it is still on the shelf."""
    from knowledge.store import KnowledgeShelf

    shelf, names = KnowledgeShelf(), [OWN_KNOWLEDGE]
    for base in shelf.names():
        names += [base, *(f"{base}@{v.version}" for v in shelf.versions(base))]
    return names, picked if picked in names else OWN_KNOWLEDGE


def chosen_knowledge(picked: str | None) -> str | None:
    """What the evaluation grounds every model in (None: each adapter's own)."""
    return None if not picked or picked == OWN_KNOWLEDGE else picked


def picks_after_training(
    picked: list[str] | None, names: list[str], trained: str | None, offered: str | None
) -> tuple[list[str], str | None]:
    """The adapters to score when the Evaluate tab opens, and the trained one offered so far.

    The picks still on the shelf stay; an adapter trained since the tab last opened
    (``trained``, not yet ``offered``) joins them, once: removed by hand, it stays removed.
    """
    kept = [name for name in picked or [] if name in names]
    if trained and trained != offered and trained not in kept:
        kept.append(trained)
    return kept, trained or offered


def _ci(d: dict, digits: int) -> str:
    return f"{d['delta']:+.{digits}f} [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"


def metric_rows(report) -> list[list]:
    rows = []
    for m in report.models:
        x, d = report.metrics[m], report.deltas.get(m)
        deltas = (
            [_ci(d["bleu"], 2), _ci(d["rouge_l"], 4), _ci(d["perplexity"], 2)] if d else ["—"] * 3
        )
        rows.append(
            [
                m,
                round(x["bleu"], 2),
                round(x["rouge_l"], 4),
                round(x["perplexity"], 2),
                f"{x['golden_passed']}/{x['golden_total']}",
                *deltas,
            ]
        )
    return rows


def sample_rows(report, adapter: str) -> tuple[list[str], list[list]]:
    """Per-sample table for one adapter vs base, worst ROUGE-L regressions first."""
    cols = [
        "row",
        "prompt",
        "reference",
        "base answer",
        f"{adapter} answer",
        "base ROUGE-L",
        f"{adapter} ROUGE-L",
        "Δ ROUGE-L",
        "Δ BLEU",
    ]
    rows = [
        [
            s["index"],
            s["prompt"],
            s["reference"],
            s["answers"]["base"],
            s["answers"][adapter],
            round(s["rouge_l"]["base"], 3),
            round(s["rouge_l"][adapter], 3),
            round(s["delta"][adapter]["rouge_l"], 3),
            round(s["delta"][adapter]["bleu"], 2),
        ]
        for s in report.samples
    ]
    rows.sort(key=lambda r: r[7])
    return cols, rows


def golden_rows(report) -> tuple[list[str], list[list]]:
    cols = ["id", "prompt", *[f"{m} passed" for m in report.models]]
    rows = [
        [r["id"], r["prompt"], *["✓" if r["checks"][m]["passed"] else "✗" for m in report.models]]
        for r in report.golden.get("results", [])
    ]
    return cols, rows


def run_summary(report) -> str:
    """One line: rows scored, how they were chosen, how fast, which engine answered, where the
    report was saved."""
    from eval.report import engine_line

    t = report.timings
    return (
        f"Scored {report.data.get('rows')} rows ({report.data.get('selection')}) in "
        f"{t.get('total_seconds')} s — {t.get('rows_per_second')} rows/s, {engine_line(report)}. "
        f"Saved to `{report.folder}`."
    )


def report_files(report) -> list[str]:
    """The report's saved files that exist, for download."""
    folder = Path(report.folder)
    names = ("report.json", "samples.csv", "summary.md", "slices.csv")
    return [str(folder / f) for f in names if (folder / f).exists()]


NO_SLICE = "(none)"
SLICE_CHOICES = [NO_SLICE, "intent", "category"]  # any other column can be typed


DEFAULT_SLICE = "intent"


def slice_column(choice: str | None, data: str | None = None) -> tuple[str | None, str]:
    """The Evaluate tab's "Slice by column" choice as evaluate()'s ``slice_by``, and a note.

    The default choice (``intent``) on data without that column evaluates unsliced and says
    so; any other missing column is refused by evaluate() with the columns the file has.
    """
    choice = (choice or "").strip()
    if choice in ("", NO_SLICE):
        return None, ""
    if choice == DEFAULT_SLICE and data:
        from eval.scoring_rows import check_slice_column

        try:
            check_slice_column(data, choice)
        except ValueError as err:
            if str(err).startswith("slice column"):
                return None, f"Not sliced: the data has no `{choice}` column."
            # an unreadable file: evaluate() refuses it with its own sentence
    return choice, ""


def slice_cap(cap, column: str | None) -> int | None:
    """The "Rows per slice" box as evaluate()'s ``rows_per_slice``: None when blank, 0 (no cap)
    or not sliced.

    Raises:
        ValueError: for a negative number, in the box's own words.
    """
    if cap is not None and cap < 0:
        raise ValueError(f"Rows per slice must be 0 (no cap) or a whole number, got {cap:g}")
    return int(cap) if cap and column else None


def slice_table(report, adapter: str) -> tuple[list[str], list[list]]:
    """The slice table for one adapter (flagged slices first); empty when not sliced."""
    from eval.slices import table

    if report is None or not report.slices or not adapter:
        return [], []
    return table(report.slices, adapter)


def gate_markdown(report) -> str:
    """Each adapter's release gate verdict, with its reasons, as Markdown."""
    lines = []
    for name, v in report.gate.items():
        icon = {"passed": "✅", "failed": "❌"}.get(v["state"], "⚠️")
        against = (
            f" against {v['against']}, the version it was tuned from"
            if v.get("against", "base") != "base"
            else ""
        )
        if lines:
            lines.append("")  # a blank line: the next heading is not the last bullet's text
        grounded = v.get("grounding", "off")
        on = f" on answers grounded in {grounded}" if grounded != "off" else ""
        lines.append(f"{icon} **Release gate of {name}{against}{on}: {v['state']}**")
        lines += [f"- {r}" for r in v["reasons"]] + [f"- _{n}_" for n in v.get("notes", [])]
        checked = v.get("checked")
        if checked:  # the same answers as an alias with check on sends them
            mark = {"passed": "✅", "failed": "❌"}.get(checked["state"], "⚠️")
            lines += [
                "",
                f"{mark} **Checked before it speaks ({checked['outcomes']}): "
                f"{checked['state']}** (what an alias with check on serves)",
            ]
            lines += [f"- {r}" for r in checked["reasons"]]
    if report.slices:
        flagged = {
            a: sum(1 for s in report.slices["slices"] if s["worse"][a]) for a in report.adapters
        }
        lines.append(
            "Slices by `{}`: {} — worse than base beyond chance (paired randomization tests, "
            "corrected over all slices and metrics): {}.".format(
                report.slices["column"],
                len(report.slices["slices"]),
                ", ".join(f"{a} {n}" for a, n in flagged.items()),
            )
        )
    return "\n".join(lines)


def support_overview(report) -> tuple[list[str], list[list]]:
    """The support checks, one row per model after the classifier's ceiling (empty: none ran)."""
    from eval.checks.tables import overview

    if report is None:
        return [], []
    return overview(report.support)


def support_note(report) -> str:
    """What the support checks could not do, and what the classifier was fitted on, as Markdown."""
    from eval.checks.tables import markdown

    if report is None or not report.support:
        return ""
    lines = [line for line in markdown(report.support).splitlines() if not line.startswith("|")]
    return "\n".join(lines)


def support_intent_rows(report, adapter: str) -> tuple[list[str], list[list]]:
    """One adapter's right-intent rate per intent beside the base and the ceiling, lowest first."""
    from eval.checks.tables import per_intent

    if report is None or not adapter:
        return [], []
    return per_intent(report.support, adapter)


def grounding_rows(report) -> tuple[list[str], list[list]]:
    """With and without grounding, one row per model and grounding, then per intent (empty:
    the evaluation was not grounded)."""
    from eval.grounded import COLUMNS, table

    part = getattr(report, "grounding", None) if report is not None else None
    if not part:
        return list(COLUMNS), []
    rows = [["(all)", *row] for row in table(part)]
    for intent in sorted(part.get("per_intent", {})):
        rows += [[intent, *row] for row in table(part, intent)]
    return ["intent", *COLUMNS], rows


def worst_answer_rows(report, adapter: str) -> tuple[list[str], list[list]]:
    """One adapter's answers with problems first (leaks, invented spans, hand-offs, wrong intent),
    each offending span in bold with a warning sign, for a Markdown column."""
    from eval.checks.tables import worst_answers

    if report is None or not adapter:
        return [], []
    return worst_answers(report, adapter, mark=lambda s: f"**⚠{_escape(s)}**")


def _escape(text: str) -> str:
    """A span shown in bold stays literal: Markdown's own characters are escaped."""
    return "".join("\\" + c if c in "\\`*_{}[]<>()#+-.!|" else c for c in text)
