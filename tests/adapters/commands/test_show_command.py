"""`python -m adapters show NAME`: the lines a user reads about one adapter."""

from __future__ import annotations

import json

from adapters.__main__ import main
from adapters.export import import_adapter


def test_show_names_the_knowledge_the_adapter_was_trained_beside(home, random_lora_dir, capsys):
    folder = import_adapter(random_lora_dir, name="support-v3").path
    assert main(["show", "support-v3"]) == 0
    assert "  knowledge " not in capsys.readouterr().out  # imported: trained beside none
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["knowledge"] = {"name": "answers-support", "version": "v2", "passages": 950}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["show", "support-v3"]) == 0
    line = next(
        x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("knowledge")
    )
    assert line.split(None, 1)[1].startswith("answers-support v2 · 950 passages")
