"""Which version answers a request for an alias: by weight, sticky per conversation.

The splits come from the home's ``releases/aliases.json`` (:mod:`adapters.shelf.aliases`),
read again only when its stamp (mtime, size, inode) changes: one ``stat`` per request, no read,
while nothing changed. A change therefore takes effect at the next request, without a restart;
requests already answering keep the version they were given.

A conversation is the request's ``user`` field, else its ``X-TuneDesk-Conversation`` header.
It keeps its version while that version is still in the alias's split, whatever its weight: a
weight of 0 takes no new conversations but lets the running ones finish; a version taken out
moves them. The conversations remembered are bounded (least recently used forgotten first). A
request with neither key is drawn by weight on its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from adapters.shelf.alias_rules import AliasError, check_auto_rollback
from adapters.shelf.aliases import grounding_of, read_aliases, since_epoch

CONVERSATION_HEADER = "X-TuneDesk-Conversation"
VERSION_HEADER = "X-TuneDesk-Version"  # every answer names the version that gave it
STICKY_MAX = 50_000  # conversations remembered; ~150 bytes each
log = logging.getLogger("tunedesk.serve")


@dataclass
class Pick:
    """The version a request went to (``alias`` None: asked by name), and when the request
    arrived (for its stats)."""

    alias: str | None
    version: str
    started: float = field(default=0.0, compare=False)


def draw(split: dict[str, int], rng: random.Random) -> str:
    """One version of ``split`` by weight (versions at 0 never drawn)."""
    point = rng.random() * sum(split.values())
    for version, weight in split.items():
        if weight > 0:
            last = version
            point -= weight
            if point < 0:
                return version
    return last  # float rounding at the very top of the range


class AliasRouter:
    """The splits of one home, watched by stamp, and the conversations' versions.

    Args:
        path: the ``aliases.json`` to watch (it may not exist yet).
        sticky_max: conversations remembered at most.
        rng: where draws come from (seed one for a repeatable split).
    """

    def __init__(self, path: Path, sticky_max: int = STICKY_MAX, rng: random.Random | None = None):
        self.path, self.sticky_max = Path(path), sticky_max
        self.rng = rng or random.Random()
        self._stamp: tuple | None = None
        self._splits: dict[str, dict[str, int]] = {}
        self._policies: dict[str, tuple[dict, float]] = {}  # alias -> (automatic rollback, since)
        self._checked: frozenset[str] = frozenset()  # aliases whose answers are checked
        self._groundings: dict[str, str] = {}  # alias -> off | auto | NAME[@vN]
        self._sticky: OrderedDict[bytes, str] = (
            OrderedDict()
        )  # (alias, conversation) digest -> version
        self._lock = threading.Lock()

    def splits(self) -> dict[str, dict[str, int]]:
        """Every alias's split as of now (read again only when the file changed)."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._reload(stamp)
        return self._splits

    def policies(self) -> dict[str, tuple[dict, float]]:
        """Alias -> (its automatic rollback, when its split took effect) for the
        aliases with one."""
        self.splits()
        return self._policies

    def checked(self, alias: str | None) -> bool:
        """Whether ``alias``'s answers are checked before they are sent (its ``check`` is on)."""
        self.splits()
        return alias in self._checked

    def grounding(self, alias: str) -> str:
        """What alias ``alias``'s answers are grounded in: ``off``, ``auto`` or ``NAME[@vN]``."""
        self.splits()
        return self._groundings.get(alias, "auto")

    def pick(self, model: str, conversation: str | None = None) -> Pick | None:
        """The version answering ``model`` when it is an alias, else None."""
        split = self.splits().get(model)
        if split is None:
            return None
        if conversation is None:
            with self._lock:
                return Pick(model, draw(split, self.rng))
        key = hashlib.blake2b(
            f"{model}\x00{conversation}".encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        with self._lock:
            version = self._sticky.get(key)
            if version in split:  # still listed, even at 0: the conversation finishes on it
                self._sticky.move_to_end(key)
            else:
                version = self._sticky[key] = draw(split, self.rng)
                while len(self._sticky) > self.sticky_max:
                    self._sticky.popitem(last=False)
        return Pick(model, version)

    def remembered(self) -> int:
        """How many conversations keep a version now."""
        return len(self._sticky)

    def _reload(self, stamp: tuple | None) -> None:
        try:
            rows = read_aliases(self.path) if stamp is not None else {}
        except AliasError as err:  # a hand edit gone wrong: keep serving the last good splits
            log.warning("aliases unchanged: %s", err)
            self._stamp = stamp
            return
        splits = {
            name: {v: w for v, w in row["versions"].items() if type(w) is int and w >= 0}
            for name, row in rows.items()
        }
        self._splits = {name: split for name, split in splits.items() if sum(split.values()) > 0}
        self._policies = {
            name: (policy, since_epoch(rows[name]))
            for name in self._splits
            if (policy := _policy(name, rows[name].get("auto_rollback")))
        }
        self._checked = frozenset(name for name in self._splits if rows[name].get("check") == "on")
        self._groundings = {name: grounding_of(rows[name]) for name in self._splits}
        self._stamp = stamp


def _policy(name: str, policy) -> dict | None:
    """An alias's automatic rollback as checked, or None (a hand-edited bad one is
    logged, not used)."""
    try:
        return check_auto_rollback(policy)
    except AliasError as err:
        log.warning("automatic rollback of %s off: %s", name, err)
        return None
