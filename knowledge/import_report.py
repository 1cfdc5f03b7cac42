"""What an import says about a file: the sentence refusing it, and the rows or sections it
left out (an empty answer, an answer that is not text, a heading with nothing under it),
counted by reason with the lines they are on."""

from __future__ import annotations

from dataclasses import dataclass

from core.user_text import cut, quote

SHOWN = 10  # places named per reason; the rest are counted


class ImportProblem(ValueError):
    """A file that cannot become passages, said in one sentence."""


@dataclass(frozen=True)
class Skip:
    """One row or section of a file that became no passage, and why."""

    what: str  # "row" or "section": what the count calls it
    reason: str  # "empty answer", "answer is not text", "no text under the heading"
    unit: str  # how ``number`` counts: "line" (of the file), "row" or "item" (of a JSON list)
    number: int  # from 1
    title: str = ""  # a section's heading, named beside its line


@dataclass(frozen=True)
class FileRead:
    """The passages of one file and what it left out."""

    name: str  # the file's name, as passages' sources give it
    passages: list
    skipped: tuple[Skip, ...] = ()

    @property
    def note(self) -> str:
        """``"faq.csv: 2 rows skipped: empty answer (lines 4, 9)."``; "" when none was."""
        return f"{cut(self.name)}: {counted(self.skipped)}." if self.skipped else ""


def counted(skipped) -> str:
    """``"3 rows skipped: empty answer (lines 3, 7), answer is not text (line 5)"``: how many,
    then each reason (in the order first met) with where."""
    what = skipped[0].what
    by_reason: dict[str, list[Skip]] = {}
    for skip in skipped:
        by_reason.setdefault(skip.reason, []).append(skip)
    reasons = ", ".join(f"{reason} ({_places(skips)})" for reason, skips in by_reason.items())
    return f"{len(skipped):,} {what}{'s' if len(skipped) != 1 else ''} skipped: {reasons}"


def _places(skips: list[Skip]) -> str:
    shown, more = skips[:SHOWN], len(skips) - SHOWN
    if any(s.title for s in shown):
        text = ", ".join(f"{s.unit} {s.number:,} {quote(s.title, 40)}" for s in shown)
    else:
        unit = shown[0].unit + ("s" if len(skips) > 1 else "")
        text = f"{unit} {', '.join(f'{s.number:,}' for s in shown)}"
    return text + (f" and {more:,} more" if more > 0 else "")
