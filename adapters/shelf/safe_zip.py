"""Unpacking an uploaded zip without trusting it: paths, links, sizes and bombs checked first."""

from __future__ import annotations

import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from core import paths

# What zipfile raises on a damaged, unsupported or lying archive (CRC mismatch, bad header).
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError, zlib.error)


@dataclass(frozen=True)
class ZipLimits:
    """What an imported zip may hold; anything beyond is refused before extraction."""

    max_members: int = 100  # an adapter is ~5 files; hundreds means something else
    max_total_bytes: int = 2 << 30  # 2 GiB uncompressed: far above any LoRA adapter
    max_ratio: float = 100.0  # uncompressed/compressed per member; float weights give ~1.1
    ratio_floor_bytes: int = 1 << 20  # small members (JSON) may compress well; ignore ratio


def safe_extract(archive: Path, dest: Path, limits: ZipLimits = ZipLimits()) -> None:
    """Extract a zip into ``dest`` after checking every member against ``limits``.

    Raises:
        ValueError: the first rule a member breaks, or a zip that cannot be read.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            _check_members(members, limits)
            written = 0
            for info in members:
                if not info.is_dir():
                    written += _extract_member(zf, info, dest, limits.max_total_bytes - written)
    except _ZIP_ERRORS as err:
        raise ValueError(f"{Path(archive).name} could not be unpacked ({err})") from None


def _check_members(members: list[zipfile.ZipInfo], limits: ZipLimits) -> None:
    if len(members) > limits.max_members:
        raise ValueError(f"zip has {len(members)} members; at most {limits.max_members}")
    for info in members:
        _check_member(info, limits)
    total = sum(info.file_size for info in members)
    if total > limits.max_total_bytes:
        raise ValueError(
            f"zip would unpack to {total} bytes; the limit is {limits.max_total_bytes}"
        )
    if len({PurePosixPath(i.filename) for i in members}) != len(members):
        raise ValueError("zip holds the same path twice; refused")


def _check_member(info: zipfile.ZipInfo, limits: ZipLimits) -> None:
    raw = info.filename
    parts = PurePosixPath(raw).parts
    if raw.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", raw) or "\\" in raw:
        raise ValueError(f"zip member {raw!r} has an absolute or Windows path; refused")
    if not parts or ".." in parts:
        raise ValueError(f"zip member {raw!r} is empty or climbs out with '..'; refused")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ValueError(f"zip member {raw!r} is a symlink; refused")
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ValueError(f"zip member {raw!r} is not a plain file; refused")
    if info.flag_bits & 0x1:
        raise ValueError(f"zip member {raw!r} is encrypted; refused")
    if info.file_size > limits.ratio_floor_bytes:
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > limits.max_ratio:
            raise ValueError(
                f"zip member {raw!r} expands {ratio:.0f}x (limit {limits.max_ratio:.0f}x): "
                "looks like a zip bomb; refused"
            )


def _extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, budget: int) -> int:
    """Stream one member out, counting bytes ourselves: the declared sizes may lie."""
    target = dest / info.filename
    paths.inside(dest, target)  # belt and braces after the name checks
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with zf.open(info) as src, open(target, "wb") as out:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            written += len(chunk)
            if written > min(budget, info.file_size):
                raise ValueError(f"zip member {info.filename!r} unpacks past its limit; refused")
            out.write(chunk)
    return written
