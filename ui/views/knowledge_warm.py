"""The Knowledge tab's kept warm-ups: which models read their knowledge into llama-server's
prompt cache each time a server starts, keep one, forget one (the API server's
:class:`serve.warm_keeper.WarmKeeper`, as ``/v1/knowledge/warm`` keeps them)."""

from __future__ import annotations

from serve.api_basics import ApiError

WARM_COLUMNS = ["model", "knowledge", "max passages", "kept since", "last replay"]
NO_KEEPER = (
    "Kept warm-ups belong to the API server, which this app was started without "
    "(`make run` starts both)."
)


def kept_table(keeper) -> list[list]:
    """One row per kept warm-up, with what its last replay did."""
    if keeper is None:
        return []
    last = {r["model"]: r for r in keeper.last}
    rows = []
    for row in keeper.rows():
        body, done = row["body"], last.get(row["model"])
        if done is None:
            said = "not replayed since the app started"
        else:
            said = "; ".join(done.get("lines") or []) or f"did not run: {done.get('error')}"
        rows.append(
            [
                row["model"],
                body.get("knowledge") or "auto",
                body.get("max_passages") or "all",
                row["updated"],
                said,
            ]
        )
    return rows


def keep_warm(keeper, model: str, knowledge: str, max_passages) -> str:
    """Keep a warm-up for ``model`` and start reading it now; a sentence saying so.

    Raises:
        ValueError: no API server, no model, a model or knowledge that cannot be warmed
            (the API's own check, nothing kept).
    """
    if keeper is None:
        raise ValueError(NO_KEEPER)
    model = (model or "").strip()
    if not model:
        raise ValueError("Name the model or alias to keep warm (base, an adapter, an alias).")
    body: dict = {"model": model, "knowledge": (knowledge or "").strip() or "auto"}
    if max_passages not in (None, "", 0):
        if float(max_passages) != int(max_passages) or int(max_passages) < 1:
            raise ValueError(  # named as the box is
                f"Passages at most must be a whole number (0 or blank: all), not {max_passages:g}"
            )
        body["max_passages"] = int(max_passages)
    try:
        keeper.ask(body)
    except ApiError as err:  # the API's own sentence
        raise ValueError(str(err)) from None
    return (
        f"Kept: {model} reads {body['knowledge']} knowledge into llama-server's cache now, in "
        "the background, and again each time a server starts."
    )


def forget_warm(keeper, model: str) -> str:
    """Forget ``model``'s kept warm-up; a sentence saying so.

    Raises:
        ValueError: no API server, or nothing kept for ``model``.
    """
    if keeper is None:
        raise ValueError(NO_KEEPER)
    model = (model or "").strip()
    if not keeper.forget(model):
        raise ValueError(f"No warm-up is kept for {model!r}.")
    return f"Forgot {model}'s warm-up: what its server read stays until that server stops."
