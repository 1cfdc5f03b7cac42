"""Aliases: one stable model name (``support-bot``) over weighted adapter versions.

An alias maps to a split, ``{"support-v3": 90, "support-v4": 10}``: adapter names on the shelf,
whole-number weights summing to 100. Serving picks a version by weight and keeps a conversation
on it while it stays in the split; a weight of 0 takes no new conversations but lets the
running ones finish; a version taken out of the split moves its conversations.

Promotion goes through the release gate: a version may gain traffic (its weight goes up) only
when its gate passed (:func:`adapters.shelf.gate_rules.entry_status`), unless the change is
forced with a reason, which the audit log keeps. Lowering a version's weight never needs one.

An alias may ask for an automatic rollback (``auto_rollback``: a margin and minimum counts,
:func:`~adapters.shelf.alias_rules.check_auto_rollback`); the server judges its versions' live
figures and, when a canary fails, calls :meth:`AliasBook.fall_back`, audited as
``auto-rollback``. An alias may ask for its answers to be checked before they are sent
(``check``: ``on``; :mod:`knowledge.answer_check`); ``off``, the default, is not stored.

Files, under ``$TUNEDESK_HOME/releases/``:

- ``aliases.json``: ``{"format", "aliases": {name: {"versions", "since", "updated", "by",
  "auto_rollback"?, "check"?, "grounding"?}}}`` (``grounding``: ``off``, ``auto`` or
  ``NAME[@vN]``; an alias without one grounds as ``auto``) (``since``: when the split took
  effect; ``updated``: the alias's last change), written atomically under a file lock, so two
  writers never lose each other's change and a reader (the server watching its mtime) never
  sees half a file;

The audit, in the home's store (``core/store``: the ``alias_audit`` table of ``tunedesk.db``, or
the PostgreSQL that ``TUNEDESK_DATABASE_URL`` names), one row per change: id, time, by, alias,
action, from, to, override reason, the versions the override let through, the change a rollback
undid, and, when it changed, ``auto_rollback`` ``{"from", "to"}``,
and ``grounding`` ``{"from", "to"}`` likewise; an automatic rollback adds its
``reason`` with the figures. The ``audit.jsonl`` of older versions is imported once, at first
start, and left as it was.
"""

from __future__ import annotations

import calendar
import time
import uuid
from pathlib import Path

from adapters.shelf.alias_rules import (
    DEFAULT_GROUNDING,
    AliasError,
    check_auto_rollback,
    check_grounding,
    check_name,
    check_setting,
    check_split,
    gate_problems,
)
from adapters.shelf.manifest import BrokenAdapterError, read_json, write_json_atomic
from adapters.shelf.store import Shelf
from core.store.home import open_store
from core.store.tables import audit_rows, put_audit

FORMAT = "tunedesk-aliases/1"
FOLDER, ALIASES_FILE, AUDIT_FILE = "releases", "aliases.json", "audit.jsonl"
ACTIONS = ("set", "promote", "rollback", "delete", "auto-rollback")
AUTO_BY = "auto-rollback"  # who the audit log names for the server's own rollbacks
KEEP = object()  # AliasBook.set: leave the automatic rollback as it is
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


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
    return {name: dict(row["versions"]) for name, row in read_aliases(path).items()}


def read_aliases(path: Path) -> dict[str, dict]:
    """Alias name -> its row as stored (``versions``, ``since``, ``auto_rollback`` ...).

    Raises:
        AliasError: the file is damaged, in one sentence saying how to recover.
    """
    if not Path(path).exists():
        return {}
    try:
        data = read_json(Path(path))
    except BrokenAdapterError as err:
        raise AliasError(
            f"{err} at {path}; fix it by hand, or restore a split from its audit "
            "(`python -m adapters alias show NAME --json`)"
        ) from None
    aliases = data.get("aliases")
    if data.get("format") != FORMAT or not isinstance(aliases, dict):
        raise AliasError(f"{path} is not a TuneDesk aliases file (format {FORMAT!r})")
    return {
        name: row
        for name, row in aliases.items()
        if isinstance(row, dict) and isinstance(row.get("versions"), dict)
    }


def since_epoch(row: dict) -> float:
    """When an alias's split took effect (``since``, else ``updated``), in
    seconds since the epoch."""
    try:
        return float(
            calendar.timegm(time.strptime(str(row.get("since") or row.get("updated")), TIME_FORMAT))
        )
    except ValueError:
        return 0.0


class AliasBook:
    """The aliases of one shelf's home: read them, change them (checked, gated, audited).

    Args:
        shelf: the shelf whose adapters the versions name (default: the current home's).
    """

    def __init__(self, shelf: Shelf | None = None):
        self.shelf = shelf or Shelf()
        self.folder = Path(self.shelf.home) / FOLDER
        self.path, self.audit_path = self.folder / ALIASES_FILE, self.folder / AUDIT_FILE
        self.store = open_store(Path(self.shelf.home))

    def all(self) -> dict[str, dict[str, int]]:
        """Every alias and its split, by name."""
        return dict(sorted(read_splits(self.path).items()))

    def get(self, name: str) -> dict[str, int]:
        """One alias's split.

        Raises:
            AliasNotFoundError: there is no such alias.
        """
        return dict(self.row(name)["versions"])

    def row(self, name: str) -> dict:
        """One alias as stored: ``versions``, ``since``, ``auto_rollback`` (when set) ...

        Raises:
            AliasNotFoundError: there is no such alias.
        """
        found = read_aliases(self.path).get(name)
        if found is None:
            raise not_found(name)
        return found

    def set(
        self,
        name: str,
        split: dict | None,
        *,
        by: str,
        force: bool = False,
        reason: str = "",
        auto_rollback=KEEP,
        check=KEEP,
        grounding=KEEP,
    ) -> dict:
        """Give alias ``name`` the split ``split`` (creating the alias when new).

        Args:
            name: the alias (a safe name, not an adapter's and not the base model's).
            split: version -> weight; every version an intact adapter on the shelf, weights
                whole numbers from 0 to 100 summing to 100. None: keep the split it has.
            by: who changes it (kept in the audit log).
            force: let versions whose release gate has not passed gain traffic.
            reason: why (required with ``force``; kept in the audit log).
            auto_rollback: the automatic rollback (``{"margin", "min_requests", "min_ratings"}``),
                None to turn it off; left as it is when not given.
            check: ``on`` or ``off``: answers checked before they are sent; left as it is when
                not given.
            grounding: what the alias's answers are grounded in (``off``, ``auto``, ``NAME`` or
                ``NAME@vN``); left as it is when not given.

        Returns:
            The audit row written (``changed`` False and nothing written when nothing changes).

        Raises:
            AliasError: every problem at once; ``param`` names the first (``versions.<v>``).
        """

        def new(old, old_policy):
            if split is None and old is None:
                raise AliasNotFoundError(
                    f"no alias named {name!r} yet; give it versions, e.g. "
                    f"`python -m adapters alias set {name} VERSION=100`",
                    "versions",
                )
            return (old if split is None else split), (
                old_policy if auto_rollback is KEEP else auto_rollback
            )

        return self._change(
            name, "set", new, by=by, force=force, reason=reason, check=check, grounding=grounding
        )

    def promote(
        self, name: str, version: str, *, by: str, force: bool = False, reason: str = ""
    ) -> dict:
        """Send all new conversations to ``version``; the others stay at 0, so theirs finish."""

        def promoted(old, policy):
            if old is None:
                raise AliasNotFoundError(
                    f"no alias named {name!r}; create it with "
                    f"`python -m adapters alias set {name} {version}=100`",
                    "name",
                )
            return {**{v: 0 for v in old if v != version}, version: 100}, policy

        return self._change(name, "promote", promoted, by=by, force=force, reason=reason)

    def rollback(self, name: str, *, by: str, force: bool = False, reason: str = "") -> dict:
        """Back to the split (and automatic rollback) before the last change not yet rolled
        back (repeat to go further)."""
        target = {}

        def earlier(_old, policy):
            row = last_undoable(self.history(name))
            if row is None and _old is None:
                raise not_found(name)
            if row is None or row["from"] is None:
                raise AliasError(
                    f"alias {name!r} has no earlier split to go back to"
                    + (" (its first change created it)" if row else ""),
                    "name",
                )
            target["undoes"] = row["id"]
            if "check" in row:
                target["check_back"] = row["check"]["from"]
            if "grounding" in row:
                target["grounding_back"] = row["grounding"]["from"]
            return row["from"], (row["auto_rollback"]["from"] if "auto_rollback" in row else policy)

        return self._change(
            name, "rollback", earlier, by=by, force=force, reason=reason, extra=target
        )

    def fall_back(
        self, name: str, judged: dict[str, int], stable: str, failing: list[str], reason: str
    ) -> dict:
        """The server's automatic rollback: the ``failing`` versions leave alias ``name`` (their
        conversations move) and their weight goes to ``stable``. Not gated: the traffic goes back
        to the version that carried most of it. Audited as ``auto-rollback`` by ``auto-rollback``.

        Raises:
            AliasError: the split is no longer ``judged`` (someone changed it since).
        """

        def fallen(old, policy):
            if old != judged:
                raise AliasError(
                    f"alias {name!r} changed while its figures were judged; judged again next time"
                )
            kept = {v: w for v, w in old.items() if v not in failing}
            kept[stable] += sum(old[v] for v in failing)
            return kept, policy

        return self._change(
            name, "auto-rollback", fallen, by=AUTO_BY, gate=False, extra={"reason": reason}
        )

    def delete(self, name: str, *, by: str) -> dict:
        """Remove alias ``name`` (its clients get 404 until it is set again or rolled back)."""

        def gone(old, _policy):
            if old is None:
                self.get(name)  # raises, naming the alias
            return None, None

        return self._change(name, "delete", gone, by=by)

    def history(self, name: str | None = None) -> list[dict]:
        """The audit rows (of alias ``name`` when given), oldest first."""
        return audit_rows(self.store, name)

    def _change(
        self,
        name,
        action,
        new,
        *,
        by,
        force=False,
        reason="",
        extra=None,
        gate=True,
        check=KEEP,
        grounding=KEEP,
    ) -> dict:
        """Read, compute (``new(old split, old policy) -> (split, policy)``), check, write and
        audit one change under the file lock (``check``: the new check setting, ``grounding``:
        the alias's new grounding, each KEEP to keep it; a rollback takes back the settings the
        undone change set)."""
        from filelock import FileLock

        check_name(
            name, self.shelf, clash=action != "delete"
        )  # an alias an adapter shadows since can go
        self.folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.folder / ".aliases.lock")):
            rows = read_aliases(self.path)
            old, old_policy = (
                (rows[name]["versions"], rows[name].get("auto_rollback"))
                if name in rows
                else (None, None)
            )
            split, policy = new(old, old_policy)
            old_grounding = grounding_of(rows.get(name) or {})
            ground = old_grounding if grounding is KEEP else check_grounding(grounding)
            if extra and "grounding_back" in extra:
                ground = extra.pop("grounding_back")
            old_check = check_setting(rows[name].get("check")) if name in rows else "off"
            if extra and "check_back" in extra:  # a rollback: the setting before the change undone
                check = extra.pop("check_back")
            new_check = old_check if check is KEEP or split is None else check_setting(check)
            forced = []
            # a new grounding or check setting serves every version otherwise: judged again
            rejudged = (
                split is not None
                and old is not None
                and (ground != old_grounding or new_check != old_check)
            )
            if split is not None and (split != old or rejudged):  # kept as is: not judged again
                split = check_split(split, self.shelf, name)
                forced = (
                    gate_problems(
                        split, old or {}, self.shelf, force, reason, ground, rejudged, new_check
                    )
                    if gate
                    else []
                )
            if split is not None:
                policy = check_auto_rollback(policy)
            row = {
                "id": uuid.uuid4().hex[:12],
                "time": time.strftime(TIME_FORMAT, time.gmtime()),
                "by": str(by)[:200],
                "alias": name,
                "action": action,
                "from": old,
                "to": split,
                "override": reason.strip() if force else None,
                "forced": forced,
                **(extra or {}),
            }
            if policy != old_policy:
                row["auto_rollback"] = {"from": old_policy, "to": policy}
            if new_check != old_check:
                row["check"] = {"from": old_check, "to": new_check}
            if split is not None and ground != old_grounding:
                row["grounding"] = {"from": old_grounding, "to": ground}
            elif split is None and old is not None and old_grounding != DEFAULT_GROUNDING:
                row["grounding"] = {"from": old_grounding, "to": None}  # a rollback brings it back
            unchanged = (
                split == old
                and policy == old_policy
                and new_check == old_check
                and "grounding" not in row
            )
            if unchanged and action != "rollback":
                return {**row, "changed": False}
            put_audit(self.store, row)  # audited first: a change the audit lacks is never live
            self._write(rows, name, split, policy, row, new_check, ground)
        return {**row, "changed": True}

    def _write(
        self,
        rows: dict,
        name: str,
        split: dict | None,
        policy: dict | None,
        change: dict,
        check: str = "off",
        grounding: str = DEFAULT_GROUNDING,
    ) -> None:
        """``rows`` with alias ``name`` changed; ``since`` moves only when its split does."""
        before = rows.get(name) or {}
        rows = {n: r for n, r in rows.items() if n != name}
        if split is not None:
            since = (
                before.get("since") or before.get("updated")
                if before.get("versions") == split
                else None
            )
            rows[name] = {
                "versions": split,
                "since": since or change["time"],
                "updated": change["time"],
                "by": change["by"],
                **({"auto_rollback": policy} if policy else {}),
                **({"check": check} if check == "on" else {}),
                **({} if grounding == DEFAULT_GROUNDING else {"grounding": grounding}),
            }
        write_json_atomic(self.path, {"format": FORMAT, "aliases": dict(sorted(rows.items()))})


def grounding_of(row: dict) -> str:
    """An alias row's grounding (``auto`` when it never said)."""
    value = row.get("grounding")
    return value if isinstance(value, str) and value else DEFAULT_GROUNDING


def last_undoable(rows: list[dict]) -> dict | None:
    """The newest change in ``rows`` that is not a rollback and was not rolled back (an
    automatic rollback is a change like any other: rolling it back brings the canary back)."""
    undone = {r.get("undoes") for r in rows if r.get("action") == "rollback"}
    for row in reversed(rows):
        if row.get("action") != "rollback" and row.get("id") not in undone:
            return row
    return None


def not_found(name: str) -> AliasNotFoundError:
    """The refusal of an alias that is not there, naming the command that lists them."""
    return AliasNotFoundError(
        f"no alias named {str(name)[:64]!r}; `python -m adapters alias list` shows them", "name"
    )
