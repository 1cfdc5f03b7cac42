"""The Review tab's view of the feedback queue: rows as a table, actions as sentences. No gradio."""

from __future__ import annotations

from core import paths
from feedback.review import STATUSES, Filter, as_day, export, queue, review
from feedback.store import FeedbackStore
from ui.views.wording import for_ui

COLUMNS = [
    "id",
    "created",
    "status",
    "rating",
    "from",
    "adapter",
    "version",
    "intent",
    "customer asked",
    "answer",
    "correction",
]
ANY = "any"


def table(
    adapter: str, rating: str, status: str, intent: str, since: str, until: str
) -> list[list[str]]:
    """The queue as table rows (newest first) under the chosen filters (``any``: no filter; a
    day box filters only once it holds a whole day, YYYY-MM-DD, not while it is typed)."""
    where = Filter(
        adapter=_opt(adapter),
        rating=_opt(rating),
        status=_opt(status),
        intent=_opt(intent),
        since=as_day(since),
        until=as_day(until),
    )
    rows = []
    for row in queue(FeedbackStore(), where):
        asked = next(
            (m["content"] for m in reversed(row.get("messages") or []) if m.get("role") == "user"),
            "(conversation not kept)",
        )
        rows.append(
            [
                row["id"],
                row.get("created", ""),
                row.get("status", "new"),
                row["rating"],
                _source(row),
                row.get("adapter", ""),
                str(row.get("version", ""))[:8],
                row.get("intent") or "",
                asked,
                row.get("answer") or "",
                row.get("correction") or "",
            ]
        )
    return rows


def picked(row: list) -> tuple[str, str, str]:
    """(id, correction, intent) of a table row, for the boxes a click fills."""
    return tuple(str(row[COLUMNS.index(k)]) for k in ("id", "correction", "intent"))


def adapters_seen() -> list[str]:
    """Adapters that have ratings, for the filter."""
    return [ANY, *sorted({str(r.get("adapter")) for r in FeedbackStore().ratings()})]


def intents_seen() -> list[str]:
    """Intent labels the ratings carry, for the filter."""
    return [ANY, *sorted({str(r["intent"]) for r in FeedbackStore().ratings() if r.get("intent")})]


def act(row_id: str, status: str | None, correction: str | None, intent: str | None = None) -> str:
    """Accept, drop, correct or label one rating (``intent``: ``""`` clears it); one sentence back.

    Raises:
        ValueError: no such rating, or the change is refused (why, in the sentence).
    """
    row_id = (row_id or "").strip()
    if not row_id:
        raise ValueError("pick a rating first: click its row or type its id (fb-...)")
    if status not in (None, *STATUSES):
        raise ValueError(f"unknown status {status!r}")
    try:
        row = review(FeedbackStore(), row_id, status, correction, intent)
    except KeyError:
        raise ValueError(f"no rating with id {row_id!r}") from None
    return (
        f"{row['id']}: {row['status']}"
        + (" (correction saved)" if correction is not None else "")
        + (f" (intent: {row['intent'] or 'none'})" if intent is not None else "")
    )


def day_note(since: str | None, until: str | None) -> str:
    """A warning for a From / To box holding a whole date that is no calendar day in
    YYYY-MM-DD (2026-02-30, 07/12/2026): the queue is not filtered by it. "" while a box is
    empty, still being typed (shorter than a date) or a real day."""
    bad = [
        f"{box}: {text}"
        for box, text in (("From", (since or "").strip()), ("To", (until or "").strip()))
        if len(text) >= len("YYYY-MM-DD") and as_day(text) is None
    ]
    if not bad:
        return ""
    one = len(bad) == 1
    return (
        f"⚠️ {' and '.join(bad)} {'is not a calendar day' if one else 'are not calendar days'} "
        f"written YYYY-MM-DD, so the queue is not filtered by {'it' if one else 'them'}."
    )


def export_accepted(name: str = "feedback", overwrite: bool = False) -> str:
    """Write the accepted ratings to datasets/ (``overwrite``: replace the files of that name);
    the sentence says where and how many.

    Raises:
        ValueError: a bad name, nothing accepted, or the name taken and ``overwrite`` not given
            (naming the tab's Overwrite box).
    """
    name = paths.safe_name((name or "").strip() or "feedback", "dataset name")
    try:
        sft, pairs, n_sft, n_pairs = export(
            FeedbackStore(), paths.subdir("datasets"), name, overwrite=overwrite
        )
    except ValueError as err:
        raise ValueError(for_ui(str(err))) from None
    return (
        f"{n_sft} SFT rows in `{sft}` (Train tab: Path) and {n_pairs} preference pairs in "
        f"`{pairs}`."
    )


def _source(row: dict) -> str:
    """Where a rating came from; a Compare verdict says which answer won."""
    source = str(row.get("source") or "")
    if source != "compare":
        return source
    return (
        f"compare: {row['preferred']} preferred"
        if row.get("preferred")
        else "compare: answer written"
    )


def _opt(value: str) -> str | None:
    value = (value or "").strip()
    return None if value in ("", ANY) else value
