"""The README fits a newcomer's first look: at most 1,500 words, no paragraph or list item
over 80 words, and the pictures it shows are there (and small)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS, MAX_BLOCK, MAX_PICTURE = 1500, 80, 300 * 1024


def blocks(text: str) -> list[str]:
    """Paragraphs and list items (code blocks and HTML left out): what a reader reads at once."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    out = []
    for para in re.split(r"\n\s*\n", text):
        if para.lstrip().startswith("<"):
            continue
        items = re.split(r"\n(?=\s*(?:[-*]|\d+\.)\s)", para)  # each list item on its own
        out += [item.strip() for item in items if item.strip()]
    return out


def words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def test_the_readme_is_short_with_short_paragraphs():
    text = (ROOT / "README.md").read_text()
    assert words(text) <= MAX_WORDS, f"README has {words(text)} words (code included)"
    long = [(words(b), b[:60]) for b in blocks(text) if words(b) > MAX_BLOCK]
    assert long == [], f"paragraphs or list items over {MAX_BLOCK} words: {long}"


def test_the_readme_shows_the_train_and_compare_pictures_and_they_exist():
    text = (ROOT / "README.md").read_text()
    linked = re.findall(r'<img src="([^"]+)"', text) + re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"docs/img/train.png", "docs/img/compare.png"} <= set(linked), linked
    first_screen = text[: text.index("## Three first clicks") + 800]
    assert (
        "make run" in first_screen
        and "make test" in first_screen
        and "docs/img/compare.png" in first_screen
    )
    for link in linked:
        picture = ROOT / link
        assert picture.is_file(), f"README shows {link}, which is not there"
        data = picture.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < MAX_PICTURE, (link, len(data))


def test_blocks_splits_list_items_and_drops_code():
    text = (
        "para one\n"
        "still one\n\n"
        "- item a\n"
        "  more a\n"
        "- item b\n\n"
        "```bash\n"
        "x y z\n"
        "```\n\n"
        "1. first\n"
        "2. second"
    )
    assert blocks(text) == [
        "para one\nstill one",
        "- item a\n  more a",
        "- item b",
        "1. first",
        "2. second",
    ]
