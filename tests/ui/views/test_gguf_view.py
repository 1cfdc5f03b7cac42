"""The GGUF export's result as the Adapters tab shows it."""

from __future__ import annotations

from pathlib import Path

from adapters.export.gguf import ExportedFile, GgufExport
from ui.views.gguf import gguf_markdown


def test_every_file_is_listed_with_size_and_sha256():
    files = [
        ExportedFile("tuned-q8_0.gguf", "merged", 144_810_912, "4d97" * 16),
        ExportedFile("Modelfile", "modelfile", 550, "52cd" * 16),
    ]
    text = gguf_markdown(GgufExport(Path("/h/exports/tuned-gguf"), files))
    assert "`/h/exports/tuned-gguf`" in text
    assert f"| `tuned-q8_0.gguf` | 138.1 MiB | `{'4d97' * 16}` |" in text
    assert f"| `Modelfile` | 0.5 KiB | `{'52cd' * 16}` |" in text
    assert "no TEMPLATE" not in text
    note = gguf_markdown(GgufExport(Path("/x"), [], template_note="it uses dates"))
    assert "The Modelfile has no TEMPLATE: it uses dates." in note
