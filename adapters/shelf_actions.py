"""What the Adapters tab and ``python -m adapters`` do to the shelf, with the sentence each says.

Both front ends call these functions, so a rename or an import refused in the browser is
refused in the same words on the command line. Every function raises ``ValueError`` (bad
input: a name, a missing adapter, a broken folder) or ``OSError`` (the disk) with one
sentence, and returns the sentence to show on success. No gradio here.
"""

from __future__ import annotations

from pathlib import Path

from adapters.shelf.store import AdapterEntry, Shelf
from core.user_text import check_unicode, quote

DELETE_UNCONFIRMED = "Tick the confirmation box first."


def names(shelf: Shelf | None = None) -> list[AdapterEntry]:
    """Every shelf entry, newest first; broken ones carry their reason."""
    return (shelf or Shelf()).list()


def show(name: str, shelf: Shelf | None = None) -> AdapterEntry:
    """One adapter's entry, with its full manifest (``status`` says whether it is usable)."""
    return (shelf or Shelf()).get(_typed(name, "adapter name"))


def rename(old: str, new: str, session=None, shelf: Shelf | None = None) -> str:
    """Rename an adapter; a session that has it active or loaded lets go of it first."""
    old, new = _typed(old, "adapter name"), _typed((new or "").strip(), "new name")
    shelf = shelf or Shelf()
    if new == old:
        shelf.path(old)  # an adapter the shelf lacks is refused as for any other new name
        return f"{old} already has that name; nothing changed."
    _not_serving(old, "renaming", shelf)
    shelf.rename(old, new)
    _forget(session, old)
    return f"Renamed {old} to {new}."


def delete(name: str, confirmed: bool, session=None, shelf: Shelf | None = None) -> str:
    """Delete an adapter for good (``confirmed`` must be True); the session drops it first."""
    name = _typed(name, "adapter name")
    if not confirmed:
        raise ValueError(DELETE_UNCONFIRMED)
    shelf = shelf or Shelf()
    shelf.path(name)  # a bad or unknown name is refused before the session is touched
    _not_serving(name, "deleting", shelf)
    _forget(session, name)
    shelf.delete(name)
    return f"Deleted {name}."


def _not_serving(name: str, doing: str, shelf: Shelf) -> None:
    """Refuse to rename or delete an adapter an alias sends traffic to: its API clients would
    get a 404 with no word to whoever did it. (A version kept at weight 0 for a rollback may
    go; rolling back to it then says it is gone.)"""
    from adapters.shelf.aliases import AliasBook

    serving = {
        alias: split[name] for alias, split in AliasBook(shelf).all().items() if split.get(name)
    }
    if serving:
        shares = ", ".join(f"{alias!r} ({share} %)" for alias, share in sorted(serving.items()))
        raise ValueError(
            f"{name} takes traffic through the alias(es) {shares}; move it to another version "
            f"first (python -m adapters alias set ALIAS OTHER=100, or the Adapters tab's "
            f"aliases), then go on {doing} it"
        )


def import_adapter(
    src: str | Path, name: str | None = None, allow_pickle: bool = False
) -> tuple[str, AdapterEntry]:
    """Import a PEFT adapter (folder or .zip); returns the sentence and the new entry."""
    from adapters.export import import_adapter as do_import

    name = _typed((name or "").strip(), "adapter name") or None
    try:
        entry = do_import(Path(_typed(str(src), "file path")), name=name, allow_pickle=allow_pickle)
    except (ValueError, OSError) as err:
        raise (OSError if isinstance(err, OSError) else ValueError)(
            f"Import refused: {err}"
        ) from None
    return f"Imported {entry.name}.", entry


def export_zip(name: str, out: str | Path | None = None) -> tuple[str, Path]:
    """Zip an adapter folder; returns the sentence and the zip's path."""
    from adapters.export import export_zip as do_zip

    path = do_zip(_typed(name, "adapter name"), Path(out) if out else None)
    return f"Zipped to {path}.", path


def export_merged(
    name: str, out: str | Path | None = None, overwrite: bool = True
) -> tuple[str, Path]:
    """Merge an adapter into its base model and save the standalone model folder."""
    from adapters.export import export_merged as do_merge

    path = do_merge(_typed(name, "adapter name"), Path(out) if out else None, overwrite=overwrite)
    return f"Merged model written to {path} (safetensors + tokenizer).", path


def _typed(value: str, what: str) -> str:
    """Text a user typed, refused with a sentence when it is not text or not valid Unicode."""
    if not isinstance(value, str):
        raise ValueError(f"the {what} must be text, got {quote(value)}")
    return check_unicode(value, f"the {what}")


def _forget(session, name: str) -> None:
    if session is None:
        return
    if session.active_adapter == name:
        session.activate(None)
    if name in session.loaded_adapters:
        session.unload_adapter(name)
