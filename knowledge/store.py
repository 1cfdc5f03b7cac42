"""Named knowledge bases with immutable versions, under ``<home>/knowledge/``.

```
knowledge/<name>/v<N>/version.json   fingerprint, created, sources, passage counts, extra facts
knowledge/<name>/v<N>/index.sqlite   the passages and their FTS5 index (knowledge.index)
knowledge/<name>/highest_version     the highest N it ever had: a deleted number is never reused
```

A version is written whole into a temporary folder and renamed (``core.paths.atomic_dir``),
and never changed after: an import makes the next version, holding the latest version's
passages with each file imported again replaced by its new passages (a changed section
replaces the old one, a removed one goes), plus those of new files (or only the new ones, with
``replace``). An import whose content equals the latest version's makes no new version.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from core import paths
from core.user_text import quote
from knowledge import index
from knowledge.passages import Passage, check, fingerprint

_VERSION = re.compile(r"^v([1-9][0-9]{0,8})$")
LATEST = "latest"
HIGHEST = "highest_version"  # a base's file: the highest version number it ever had
RESERVED = ("auto", "off")  # what a request, an alias or Chat says instead of a name


class KnowledgeNotFound(ValueError):
    """No knowledge base, or no version, by the name asked for."""


@dataclass(frozen=True)
class Version:
    """One immutable version of a knowledge base."""

    name: str
    version: str  # "v1", "v2", ...
    folder: Path
    fingerprint: str
    created: str
    passages: int
    sources: list = field(default_factory=list)
    kinds: dict = field(default_factory=dict)  # kind -> passage count
    extra: dict = field(default_factory=dict)  # e.g. the dataset fingerprint of training pairs

    @property
    def index_path(self) -> Path:
        return self.folder / "index.sqlite"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "created": self.created,
            "passages": self.passages,
            "sources": self.sources,
            "kinds": self.kinds,
            **self.extra,
        }

    def search(self, query: str, k: int = 3, intent: str | None = None) -> list[index.Hit]:
        """The ``k`` passages that best match ``query`` (BM25), best first (``intent``: only
        passages labelled with it or with none)."""
        return index.search(self.index_path, query, k, intent=intent)

    def articles_of(self, intent: str) -> list[tuple[int, Passage]]:
        """``(id, passage)`` of the articles and macros labelled ``intent``, in id order."""
        return index.articles_of(self.index_path, intent)

    def passages_page(self, offset: int = 0, limit: int | None = None) -> list[tuple[int, Passage]]:
        """``(id, passage)`` in id order."""
        return index.passages(self.index_path, offset, limit)


def merged(kept: list[Passage], fresh: list[Passage], files: list[str]) -> list[Passage]:
    """The next version's passages: ``kept`` (the latest version's), each file imported again
    (one of ``files``) replaced by its ``fresh`` passages where its old ones stood, then the
    passages of files new to the base.

    A section changed or removed in a file imported again is so in the new version: its old
    text is not kept beside the new one.
    """

    def file_of(passage: Passage) -> str | None:
        source = passage.source
        return next(
            (f for f in files if source == f or source.startswith((f"{f}#", f"{f}:"))), None
        )

    by_file: dict[str | None, list[Passage]] = {}
    for passage in fresh:
        by_file.setdefault(file_of(passage), []).append(passage)
    out, placed = [], set()
    for passage in kept:
        file = file_of(passage)
        if file is None:
            out.append(passage)
        elif file not in placed:
            placed.add(file)
            out.extend(by_file.get(file, []))
    out.extend(p for f, group in by_file.items() if f not in placed for p in group)
    return list(dict.fromkeys(out))


class KnowledgeShelf:
    """The knowledge bases of one home folder.

    Args:
        root: the folder holding them (default ``<home>/knowledge``).
    """

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else paths.subdir("knowledge")

    def names(self) -> list[str]:
        """Every knowledge base with at least one version, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and not p.name.startswith(".") and self._numbers(p.name)
        )

    def versions(self, name: str) -> list[Version]:
        """The versions of ``name``, oldest first (none when it does not exist)."""
        return [self._read(name, n) for n in self._numbers(name)]

    def get(self, name: str, version: str = LATEST) -> Version:
        """One version (``latest``: the newest).

        Raises:
            KnowledgeNotFound: no such knowledge base or version, named with what there is.
        """
        numbers = self._numbers(name)
        if not numbers:
            known = ", ".join(self.names()) or "none yet; import a file first"
            raise KnowledgeNotFound(
                f"no knowledge base named {quote(name)} (knowledge bases: {known})"
            )
        if version in (LATEST, "", None):
            return self._read(name, numbers[-1])
        match = _VERSION.fullmatch(str(version))
        if not match or int(match.group(1)) not in numbers:
            raise KnowledgeNotFound(
                f"{name} has no version {quote(version)} "
                f"(versions: {', '.join(f'v{n}' for n in numbers)})"
            )
        return self._read(name, int(match.group(1)))

    def add(
        self,
        name: str,
        passages: list[Passage],
        sources: list[str],
        *,
        replace: bool = False,
        extra: dict | None = None,
    ) -> tuple[Version, bool]:
        """Make the next version of ``name`` from the latest one's passages and ``passages``.

        Args:
            replace: the new version holds ``passages`` only.
            extra: facts kept in ``version.json`` (the dataset fingerprint of training pairs).

        Returns:
            ``(version, created)``; ``created`` is False when the content equals the latest
            version's, which is then returned unchanged.

        Raises:
            ValueError: a bad name, or no passage.
        """
        paths.safe_name(name, "knowledge base name")
        if name.lower() in RESERVED:
            raise ValueError(
                f"{name!r} is not a knowledge base name: it says how to ground "
                f"({', '.join(RESERVED)}); choose another"
            )
        passages = [check(p) for p in passages]
        if not passages:
            raise ValueError("nothing to add: no passage with text")
        numbers = self._numbers(name)
        latest = self._read(name, numbers[-1]) if numbers else None
        if latest is not None and not replace:
            kept = [p for _, p in latest.passages_page()]
            passages = merged(kept, list(dict.fromkeys(passages)), sources)
            sources = list(dict.fromkeys([*latest.sources, *sources]))
        digest = fingerprint(passages)
        if latest is not None and latest.fingerprint == digest:
            return latest, False
        for _ in range(5):  # another import may take the number between the look and the rename
            number = max([0, *self._numbers(name), self._highest(name)]) + 1
            try:
                return self._write(name, number, passages, sources, digest, extra or {}), True
            except FileExistsError:
                continue
        raise RuntimeError(f"could not make a new version of {name}: others keep writing it")

    def find(self, name: str, **facts) -> Version | None:
        """The newest version of ``name`` whose extra facts include ``facts``."""
        for version in reversed(self.versions(name)):
            if all(version.extra.get(k) == v for k, v in facts.items()):
                return version
        return None

    def delete(self, name: str, version: str | None = None) -> list[str]:
        """Delete one version of ``name``, or every version (``version`` None).

        Returns:
            The versions deleted.

        Raises:
            ValueError: no such knowledge base or version.
        """
        # The base's folder stays with its highest number (HIGHEST), so a number once given is
        # never given to other content: an alias pinned to a deleted vN stays refused.
        targets = self.versions(name) if version is None else [self.get(name, version)]
        if not targets:
            self.get(name)  # raises the sentence naming what there is
        for target in targets:
            shutil.rmtree(paths.inside(self.root, target.folder))
        return [t.version for t in targets]

    # -- files ------------------------------------------------------------------------------

    def _numbers(self, name: str) -> list[int]:
        try:
            paths.safe_name(name, "knowledge base name")
        except ValueError:
            return []
        folder = self.root / name
        if not folder.is_dir():
            return []
        found = (_VERSION.fullmatch(p.name) for p in folder.iterdir())
        return sorted(
            int(m.group(1)) for m in found if m and (folder / m.group(0) / "version.json").is_file()
        )

    def _highest(self, name: str) -> int:
        """The highest version number ``name`` ever had (0: none recorded)."""
        try:
            return int((self.root / name / HIGHEST).read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            return 0

    def _read(self, name: str, number: int) -> Version:
        folder = self.root / name / f"v{number}"
        meta = json.loads((folder / "version.json").read_text(encoding="utf-8"))
        return Version(
            name,
            f"v{number}",
            folder,
            meta["fingerprint"],
            meta["created"],
            meta["passages"],
            meta.get("sources", []),
            meta.get("kinds", {}),
            meta.get("extra", {}),
        )

    def _write(self, name, number, passages, sources, digest, extra) -> Version:
        kinds: dict[str, int] = {}
        for p in passages:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        meta = {
            "name": name,
            "version": f"v{number}",
            "fingerprint": digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "passages": len(passages),
            "sources": sources,
            "kinds": kinds,
            "extra": extra,
        }
        with paths.atomic_dir(self.root / name / f"v{number}") as tmp:
            index.build(tmp / "index.sqlite", passages)
            (tmp / "version.json").write_text(
                json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8"
            )
        if number > self._highest(name):
            mark = self.root / name / HIGHEST
            tmp = mark.with_name(f".{HIGHEST}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(f"{number}\n", encoding="utf-8")
            os.replace(tmp, mark)
        return self._read(name, number)
