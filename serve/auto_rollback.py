"""The automatic rollback: a canary that does worse than the stable version leaves its alias.

An alias asks for it with ``auto_rollback`` (:func:`adapters.shelf.alias_rules.check_auto_rollback`:
a margin, ``min_requests``, ``min_ratings``). Its stable version is the one with the largest
weight (the first listed on a tie); every other version in the split is a canary, at 0 too (its
conversations are still answering). Counting only what happened since the split took effect,
a canary fails when

- both it and the stable version answered ``min_requests`` times or more, and its error rate
  exceeds the stable version's by more than the margin; or
- both were rated ``min_ratings`` times or more, and its thumbs-down rate exceeds the stable
  version's by more than the margin.

The failing canaries then leave the split, their weight going to the stable version
(:meth:`adapters.shelf.aliases.AliasBook.fall_back`, audited by ``auto-rollback`` with the
figures as the reason). The server checks at a request for any alias and after a rating, at
most once per ``every_s`` seconds, in the worker thread that request already runs on; one check
at a time, the others go on without waiting.
"""

from __future__ import annotations

import logging
import threading
import time

from adapters.alias_actions import change_sentence
from adapters.shelf.alias_rules import AliasError
from adapters.shelf.aliases import AliasBook
from serve.version_stats import thumbs

CHECK_EVERY_S = 5.0
log = logging.getLogger("tunedesk.serve")


def stable_version(split: dict[str, int]) -> str:
    """The version with the largest weight (the first listed on a tie)."""
    return max(split, key=lambda v: split[v])  # max keeps the first of equals


def judge(split: dict[str, int], figures: dict[str, dict], policy: dict) -> dict[str, str]:
    """The canaries of ``split`` that fail against its stable version, each with why.

    Args:
        split: version -> weight.
        figures: version -> ``{"requests", "errors", "thumbs_up", "thumbs_down"}`` since the
            split took effect.
        policy: ``{"margin", "min_requests", "min_ratings"}``.

    Returns:
        ``{canary: the figures that failed it, in words}`` (empty: none fails).
    """
    stable = stable_version(split)
    base, margin = figures[stable], policy["margin"]
    failing = {}
    for version in split:
        got = figures[version]
        if version == stable:
            continue
        said = []
        if min(got["requests"], base["requests"]) >= policy["min_requests"]:
            mine, theirs = got["errors"] / got["requests"], base["errors"] / base["requests"]
            if mine - theirs > margin:
                said.append(
                    f"error rate {mine:.2f} ({got['errors']} of {got['requests']} requests) "
                    f"against {stable}'s {theirs:.2f} ({base['errors']} of {base['requests']})"
                )
        rated, base_rated = (
            got["thumbs_up"] + got["thumbs_down"],
            base["thumbs_up"] + base["thumbs_down"],
        )
        if min(rated, base_rated) >= policy["min_ratings"]:
            mine, theirs = got["thumbs_down"] / rated, base["thumbs_down"] / base_rated
            if mine - theirs > margin:
                said.append(
                    f"thumbs-down rate {mine:.2f} ({got['thumbs_down']} of {rated} ratings) "
                    f"against {stable}'s {theirs:.2f} ({base['thumbs_down']} of {base_rated})"
                )
        if said:
            failing[version] = (
                f"{version}: " + " and ".join(said) + f", more than the margin {margin:g}"
            )
    return failing


class AutoRollback:
    """Judges the aliases that ask for it, with one server's live figures and ratings.

    Args:
        server: the :class:`serve.openai_api.OpenAIServer` (its alias router, stats, feedback,
            engines and shelf).
        every_s: seconds between checks at least (0: at every request and rating).
    """

    def __init__(self, server, every_s: float = CHECK_EVERY_S):
        self.server, self.every_s = server, every_s
        self._next = 0.0
        self._lock = threading.Lock()

    def maybe_check(self) -> list[dict]:
        """Check every alias with an automatic rollback when a check is due and none runs;
        the audit rows of the rollbacks made (a failure is logged, never raised)."""
        policies = self.server.aliases.policies()
        if not policies or time.monotonic() < self._next or not self._lock.acquire(blocking=False):
            return []
        try:
            self._next = time.monotonic() + self.every_s
            return [
                row
                for name, (policy, since) in policies.items()
                if (row := self.check(name, policy, since)) is not None
            ]
        except (
            Exception
        ):  # a rollback that cannot be judged must not fail the request that found it
            log.exception("automatic rollback: the check failed")
            return []
        finally:
            self._lock.release()

    def check(self, name: str, policy: dict, since: float) -> dict | None:
        """Judge alias ``name`` and roll its failing canaries back; the audit row, or None."""
        split = self.server.aliases.splits().get(name)
        if not split or len(split) < 2:
            return None
        figures = self.figures(split, since)
        failing = judge(split, figures, policy)
        if not failing:
            return None
        try:
            row = AliasBook(self.server.shelf()).fall_back(
                name, split, stable_version(split), list(failing), "; ".join(failing.values())
            )
        except (
            AliasError
        ) as err:  # changed meanwhile (or the stable version is gone): judged again later
            log.warning("automatic rollback of %s not made: %s", name, err)
            return None
        log.warning("automatic rollback: %s", change_sentence(row))
        return row

    def figures(self, split: dict[str, int], since: float) -> dict[str, dict]:
        """Each version's requests, errors and ratings since ``since`` (seconds since the epoch)."""
        ratings = self.server.feedback.ratings()
        got = {}
        for version in split:
            requests, errors = self.server.stats.counts(version, since)
            try:
                weights = self.server.engines.weights_hash(version)
            except ValueError:  # gone from the shelf: no rating can be its
                weights = ""
            rated = thumbs(ratings, version, weights, since)
            got[version] = {
                "requests": requests,
                "errors": errors,
                "thumbs_up": rated["thumbs_up"],
                "thumbs_down": rated["thumbs_down"],
            }
        return got
