"""`python -m adapters export-gguf NAME`: flags refused before the minutes of converting."""

from __future__ import annotations

import pytest

from adapters.__main__ import main
from adapters.export import import_adapter


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--verify", "-1"], "--verify must be from 0 to 30 golden prompts"),
        (["--verify", "31"], "--verify must be from 0 to 30 golden prompts"),
        (["--verify", "2", "--max-new-tokens", "0"], "--max-new-tokens must be from 1 to 2048"),
        (["--verify", "2", "--max-new-tokens", "-5"], "--max-new-tokens must be from 1 to 2048"),
    ],
)
def test_bad_verify_flags_are_refused_before_anything_is_exported(
    home, random_lora_dir, monkeypatch, capsys, flags, said
):
    """--verify -1 verified 29 of the 30 golden prompts (a slice from the end), and a bad
    answer budget failed only after the export: both are a sentence and exit 2 before it."""
    import adapters.export.gguf as gguf

    import_adapter(random_lora_dir, name="support")
    exported = []
    monkeypatch.setattr(gguf, "export_gguf", lambda *a, **k: exported.append(a))
    assert main(["export-gguf", "support", *flags]) == 2
    assert said in capsys.readouterr().err and exported == []
    assert not (home / "exports" / "support-gguf").exists()
