"""Aliases: one stable model name (``support-bot``) over weighted adapter versions.

An alias maps to a split, ``{"support-v3": 90, "support-v4": 10}``: adapter names on the shelf,
whole-number weights summing to 100. Serving picks a version by weight and keeps a conversation
on it while it stays in the split; a weight of 0 takes no new conversations but lets the
running ones finish; a version taken out of the split moves its conversations.

Promotion goes through the release gate: a version may gain traffic (its weight goes up) only
when its gate passed (:func:`adapters.shelf.gate_rules.entry_status`), unless the change is
forced with a reason, which the audit log keeps. Lowering a version's weight never needs one.

Files, under ``$TUNEDESK_HOME/releases/``:

- ``aliases.json``: ``{"format", "aliases": {name: {"versions", "updated", "by"}}}``, written
  atomically under a file lock, so two writers never lose each other's change and a reader
  (the server watching its mtime) never sees half a file;
- ``audit.jsonl``: one line per change: id, time, by, alias, action, from, to, override reason,
  the versions the override let through, and the change a rollback undid.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from adapters.shelf.alias_rules import AliasError, check_name, check_split, gate_problems
from adapters.shelf.manifest import BrokenAdapterError, read_json, write_json_atomic
from adapters.shelf.store import Shelf
from core.paths import append_line, read_json_lines

FORMAT = "tunedesk-aliases/1"
FOLDER, ALIASES_FILE, AUDIT_FILE = "releases", "aliases.json", "audit.jsonl"
ACTIONS = ("set", "promote", "rollback", "delete")


class AliasNotFoundError(AliasError):
    """No alias of that name."""


def aliases_path(home: Path) -> Path:
    """Where a home keeps its aliases (the server watches this file)."""
    return Path(home) / FOLDER / ALIASES_FILE


def read_splits(path: Path) -> dict[str, dict[str, int]]:
    """Alias name -> its split, from ``aliases.json`` (``{}`` when there is none yet).

    Raises:
        AliasError: the file is damaged, in one sentence saying how to recover.
    """
    if not Path(path).exists():
        return {}
    try:
        data = read_json(Path(path))
    except BrokenAdapterError as err:
        raise AliasError(f"{err} at {path}; fix it by hand, or restore a split from "
                         f"{Path(path).parent / AUDIT_FILE}") from None
    aliases = data.get("aliases")
    if data.get("format") != FORMAT or not isinstance(aliases, dict):
        raise AliasError(f"{path} is not a TuneDesk aliases file (format {FORMAT!r})")
    return {name: dict(row["versions"]) for name, row in aliases.items()
            if isinstance(row, dict) and isinstance(row.get("versions"), dict)}


class AliasBook:
    """The aliases of one shelf's home: read them, change them (checked, gated, audited).

    Args:
        shelf: the shelf whose adapters the versions name (default: the current home's).
    """

    def __init__(self, shelf: Shelf | None = None):
        self.shelf = shelf or Shelf()
        self.folder = Path(self.shelf.home) / FOLDER
        self.path, self.audit_path = self.folder / ALIASES_FILE, self.folder / AUDIT_FILE

    def all(self) -> dict[str, dict[str, int]]:
        """Every alias and its split, by name."""
        return dict(sorted(read_splits(self.path).items()))

    def get(self, name: str) -> dict[str, int]:
        """One alias's split.

        Raises:
            AliasNotFoundError: there is no such alias.
        """
        found = read_splits(self.path).get(name)
        if found is None:
            raise AliasNotFoundError(f"no alias named {str(name)[:64]!r}; `python -m adapters alias list` "
                                     "shows them", "name")
        return found

    def set(self, name: str, split: dict, *, by: str, force: bool = False, reason: str = "") -> dict:
        """Give alias ``name`` the split ``split`` (creating the alias when new).

        Args:
            name: the alias (a safe name, not an adapter's and not the base model's).
            split: version -> weight; every version an intact adapter on the shelf, weights
                whole numbers from 0 to 100 summing to 100.
            by: who changes it (kept in the audit log).
            force: let versions whose release gate has not passed gain traffic.
            reason: why (required with ``force``; kept in the audit log).

        Returns:
            The audit row written (``changed`` False and nothing written when the split is the
            same as before).

        Raises:
            AliasError: every problem at once; ``param`` names the first (``versions.<v>``).
        """
        return self._change(name, "set", lambda _old: split, by=by, force=force, reason=reason)

    def promote(self, name: str, version: str, *, by: str, force: bool = False, reason: str = "") -> dict:
        """Send all new conversations to ``version``; the others stay at 0, so theirs finish."""
        def promoted(old):
            if old is None:
                raise AliasNotFoundError(f"no alias named {name!r}; create it with "
                                         f"`python -m adapters alias set {name} {version}=100`", "name")
            return {**{v: 0 for v in old if v != version}, version: 100}

        return self._change(name, "promote", promoted, by=by, force=force, reason=reason)

    def rollback(self, name: str, *, by: str, force: bool = False, reason: str = "") -> dict:
        """Back to the split before the last change not yet rolled back (repeat to go further)."""
        target = {}

        def earlier(_old):
            row = last_undoable(self.history(name))
            if row is None or row["from"] is None:
                raise AliasError(f"alias {name!r} has no earlier split to go back to"
                                 + (" (its first change created it)" if row else ""), "name")
            target["undoes"] = row["id"]
            return row["from"]

        return self._change(name, "rollback", earlier, by=by, force=force, reason=reason, extra=target)

    def delete(self, name: str, *, by: str) -> dict:
        """Remove alias ``name`` (its clients get 404 until it is set again or rolled back)."""
        def gone(old):
            if old is None:
                self.get(name)  # raises, naming the alias
            return None

        return self._change(name, "delete", gone, by=by)

    def history(self, name: str | None = None) -> list[dict]:
        """The audit rows (of alias ``name`` when given), oldest first; torn lines skipped."""
        return [r for r in read_json_lines(self.audit_path) if name is None or r.get("alias") == name]

    def _change(self, name, action, new_split, *, by, force=False, reason="", extra=None) -> dict:
        """Read, compute, check, write and audit one change under the file lock."""
        from filelock import FileLock

        check_name(name, self.shelf, clash=action != "delete")  # an alias an adapter shadows since can go
        self.folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.folder / ".aliases.lock")):
            aliases = read_splits(self.path)
            old = aliases.get(name)
            split = new_split(old)
            forced = []
            if split is not None:
                split = check_split(split, self.shelf, name)
                forced = gate_problems(split, old or {}, self.shelf, force, reason)
            row = {"id": uuid.uuid4().hex[:12], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "by": str(by)[:200], "alias": name, "action": action, "from": old, "to": split,
                   "override": reason.strip() if force else None, "forced": forced, **(extra or {})}
            if split == old and action != "rollback":
                return {**row, "changed": False}
            self._write({**aliases, name: split} if split is not None else
                        {k: v for k, v in aliases.items() if k != name}, by)
            append_line(self.audit_path, json.dumps(row, ensure_ascii=False))
        return {**row, "changed": True}

    def _write(self, aliases: dict, by: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        previous = _rows(self.path)
        rows = {n: previous.get(n) if previous.get(n, {}).get("versions") == s else
                {"versions": s, "updated": now, "by": str(by)[:200]} for n, s in sorted(aliases.items())}
        write_json_atomic(self.path, {"format": FORMAT, "aliases": rows})


def last_undoable(rows: list[dict]) -> dict | None:
    """The newest change in ``rows`` that is not a rollback and was not rolled back."""
    undone = {r.get("undoes") for r in rows if r.get("action") == "rollback"}
    for row in reversed(rows):
        if row.get("action") != "rollback" and row.get("id") not in undone:
            return row
    return None


def _rows(path: Path) -> dict:
    try:
        return read_json(path).get("aliases") or {}
    except BrokenAdapterError:
        return {}

