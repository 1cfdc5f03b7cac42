"""export_gguf: the merged model and the LoRA pair, read back by transformers and by llama.cpp."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from llama_run import llama_or_skip, logprob_gap, served
from shelf_helpers import put_adapter

from adapters.export.gguf import export_gguf
from adapters.export.llama_tools import LlamaToolsError
from adapters.shelf.store import Shelf
from core.llama_cpp import one_shot

TEXT = "I want a refund for my order, please."


def merged_torch(base_dir: Path, name: str):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    return PeftModel.from_pretrained(base, Shelf().path(name)).merge_and_unload().eval()


def test_export_writes_merged_and_lora_files_that_llama_cpp_and_transformers_read(
    home, tiny_real_tok
):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    llama_or_skip()
    folder = tiny_real_tok("llama")
    put_adapter(folder, "tuned", targets=("q_proj", "v_proj", "down_proj"))
    seen = []
    result = export_gguf(
        "tuned",
        ("f16", "q8_0", "q4_k_m"),
        lora=True,
        base_type="f32",
        on_progress=lambda f, m: seen.append(f),
    )
    out = home / "exports" / "tuned-gguf"
    assert result.folder == out and seen[-1] == 1.0 and seen == sorted(seen)  # progress only grows
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "Modelfile",
        "Modelfile.lora",
        "README.md",
        "base-f32.gguf",
        "manifest.json",
        "tuned-f16.gguf",
        "tuned-lora-f16.gguf",
        "tuned-q4_k_m.gguf",
        "tuned-q8_0.gguf",
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    for f in manifest["files"]:  # sizes and sha256 are the files' own
        data = (out / f["file"]).read_bytes()
        assert f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert (out / "Modelfile").read_text().startswith("FROM ./tuned-q8_0.gguf\nTEMPLATE")
    lora_modelfile = (out / "Modelfile.lora").read_text()
    assert lora_modelfile.startswith("# ADAPTER needs an Ollama older than 0.34.1")
    assert "\nFROM ./base-f32.gguf\nADAPTER ./tuned-lora-f16.gguf\n" in lora_modelfile
    assert "older than 0.34.1" in (out / "README.md").read_text()
    assert sorted(p.name for p in (home / "exports").iterdir()) == [
        "gguf",
        "tuned-gguf",
    ]  # no temp left

    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(TEXT).input_ids
    merged = merged_torch(folder, "tuned")
    with torch.no_grad():
        want = merged(torch.tensor([ids])).logits[0, -1].numpy()
    # transformers' own GGUF loader reads the F16 merged file back (de-quantized to float32).
    back = AutoModelForCausalLM.from_pretrained(
        out, gguf_file="tuned-f16.gguf", dtype=torch.float32
    )
    with torch.no_grad():
        round_trip = back.eval()(torch.tensor([ids])).logits[0, -1].numpy()
    scale = np.abs(want).max()
    assert np.abs(round_trip - want).max() / scale < 5e-3  # F16 rounding of the weights only
    with served(out / "tuned-f16.gguf") as server:
        gap, same_first = logprob_gap(server, ids, want)
        assert gap < 2e-2 and same_first
    with served(out / "base-f32.gguf", lora=out / "tuned-lora-f16.gguf") as server:
        gap, same_first = logprob_gap(server, ids, want)
        assert gap < 2e-2 and same_first
    with served(out / "tuned-q4_k_m.gguf") as server:
        assert one_shot.tokenize(server, TEXT) == ids  # the file carries the tokenizer


def test_a_failing_conversion_leaves_nothing_and_keeps_the_old_export(
    home, tiny_real_tok, tmp_path, monkeypatch, capsys
):
    from adapters.export import llama_tools

    llama_or_skip()
    put_adapter(tiny_real_tok("llama"), "tuned")
    first = export_gguf("tuned", ("q8_0",))
    before = {p.name: p.read_bytes() for p in first.folder.iterdir()}
    with pytest.raises(ValueError, match="already exists"):
        export_gguf("tuned", ("q8_0",))
    # A converter that writes half a file, then fails (as on a full disk).
    tools = tmp_path / "tools"
    tools.mkdir()
    real = llama_tools.tools_dir()
    for part in ("gguf-py", "conversion", "convert_lora_to_gguf.py"):
        (tools / part).symlink_to(real / part)
    (tools / "convert_hf_to_gguf.py").write_text(
        "import sys\n"
        "out = sys.argv[sys.argv.index('--outfile') + 1]\n"
        "open(out, 'wb').write(b'GGUF' * 1000)\n"
        "print('ERROR:hf-to-gguf:No space left on device', flush=True)\nsys.exit(1)\n"
    )
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tools))
    with pytest.raises(LlamaToolsError, match="No space left on device"):
        export_gguf("tuned", ("f16",), overwrite=True)
    assert {p.name: p.read_bytes() for p in first.folder.iterdir()} == before
    # From the command line: one sentence naming the converter's error and its log.
    from adapters.__main__ import main

    capsys.readouterr()
    assert main(["export-gguf", "tuned", "--types", "f16", "--overwrite"]) == 1
    log = home / "exports" / "tuned-gguf.log"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: convert_hf_to_gguf.py failed: No space left on device; llama.cpp's output "
        f"is in {log}"
    )
    assert "ERROR:hf-to-gguf:No space left on device" in log.read_text()
    log.unlink()
    assert sorted(p.name for p in (home / "exports").iterdir()) == ["tuned-gguf"]


def test_bad_requests_get_a_sentence_and_write_nothing(home, tiny_real_tok, tmp_path, monkeypatch):
    folder = tiny_real_tok("llama")
    put_adapter(folder, "dora", dora=True)
    with pytest.raises(ValueError, match="DoRA adapter"):
        export_gguf("dora", (), lora=True)
    with pytest.raises(ValueError, match="nothing to export"):
        export_gguf("dora", ())
    with pytest.raises(ValueError, match="unknown GGUF type 'q2_x'"):
        export_gguf("dora", ("q2_x",))
    put_adapter(folder, "broken")
    (Shelf().path("broken") / "manifest.json").write_text("[]")
    with pytest.raises(ValueError, match="broken"):
        export_gguf("broken")
    monkeypatch.setenv("TUNEDESK_LLAMA_CPP_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(LlamaToolsError, match="run `make setup`"):
        export_gguf("dora", ("f16",))
    assert [p.name for p in (home / "exports").iterdir()] == []


def test_cli_exports_and_answers_bad_input_with_exit_2(home, tiny_real_tok, capsys):
    from adapters.__main__ import main

    llama_or_skip()
    put_adapter(tiny_real_tok("llama"), "tuned")
    capsys.readouterr()
    assert main(["export-gguf", "tuned", "--types", "q8_0", "--json"]) == 0
    said = capsys.readouterr()
    report = json.loads(said.out)
    # stderr is no terminal here (as in CI or a log): a line per step, none of the
    # converter's own lines, which go to a log next to the export.
    log = home / "exports" / "tuned-gguf.log"
    assert "INFO:" in log.read_text() and "INFO:" not in said.err
    assert said.err.splitlines() == [
        "warning: adapter 'tuned' has not passed its release gate (not evaluated: no "
        "evaluation has checked its release gate yet); exporting anyway",
        "[1/2] PEFT merge: starting",
        "[2/2] merged q8_0: starting",
        f"llama.cpp's output is in {log}",
    ]
    assert [f["file"] for f in report["files"]] == ["Modelfile", "README.md", "tuned-q8_0.gguf"]
    assert main(["export-gguf", "tuned", "--types", "q8_0"]) == 2
    assert "already exists; give --overwrite" in capsys.readouterr().err
    precious = home / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    for out, said in ((Shelf().root, "on the adapter shelf"), (precious, "not a GGUF export")):
        assert main(["export-gguf", "tuned", "--out", str(out), "--overwrite"]) == 2
        assert said in capsys.readouterr().err
    assert (precious / "notes.txt").read_text() == "keep me" and Shelf().get("tuned").ok
    assert main(["export-gguf", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no adapter named 'nope'" in err
    shutil.rmtree(home / "exports" / "tuned-gguf")
