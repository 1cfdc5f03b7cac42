"""The six families people fine-tune, end to end: Qwen3, Gemma 3, Llama 3.x, Phi-3, Mistral and
Granite, each a tiny random model with its family's own template (tests/family_models.py).

Per family: supervised training (two steps) and a CPO step on top, the release gate on an
evaluation of a few held-out rows, both versions on the shelf; ``/v1`` on PyTorch answering
the greedy tokens plain transformers + PEFT give; the base and the LoRA converted by llama.cpp's
own converters (the GGUF export), served by llama-server, answering the same greedy tokens,
directly and through ``/v1``. Everything is tiny (rows of at most 64 tokens, 8 new tokens):
the families' plumbing is under test here, not their learning.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from family_models import FAMILIES
from llama_run import llama_or_skip, served
from run_helpers import tiny_run_config
from serve_helpers import api_app

from bench.local_server import serving

pytestmark = pytest.mark.timeout(600)
QUESTION = [{"role": "user", "content": "Where is my order?"}]
NEW_TOKENS = 8
# llama.cpp converts the tiny Phi-3 but its loader refuses the vocabulary ("unordered_map::at"):
# Phi-3 with a GPT-2 BPE is Phi-4 mini's layout, and this made-up tokenizer (SmolLM2's vocabulary
# under Phi-3's markers) is not one llama.cpp's Phi-3 loader knows. The app says so and
# PyTorch answers.
LLAMA_CPP_REFUSES = {"phi3"}


@pytest.fixture(scope="module")
def shelf_home(tmp_path_factory):
    """One TuneDesk home for the module: every family's adapters on one shelf."""
    home = tmp_path_factory.mktemp("families-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNEDESK_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def tuned(family_dir, shelf_home, tmp_path_factory):
    """``tuned(family)``: the family trained (SFT, then CPO) and evaluated, once. Its GGUF
    export (two converter processes) starts in the background right after, beside the next
    family's training: it needs no llama-server, only the converters."""
    from adapters.export.gguf import export_gguf

    done: dict[str, dict] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="families-export") as exports:

        def run(family: str) -> dict:
            if family not in done:
                pairs = tmp_path_factory.mktemp(f"pairs-{family}")
                done[family] = _train_and_evaluate(family, family_dir(family), pairs)
                done[family]["export"] = exports.submit(
                    export_gguf, done[family]["sft"], (), lora=True, base_type="f16"
                )
            return done[family]

        yield run


def _train_and_evaluate(family: str, model_dir: Path, tmp: Path) -> dict:
    from eval.run import evaluate
    from finetune.train import train
    from finetune.train.preference import PreferenceConfig, train_preference
    from inference.generate import GenerationSettings
    from inference.session import ModelSession

    cfg = tiny_run_config(model_dir, max_steps=2, batch_size=4)
    cfg.data.max_samples, cfg.data.max_length, cfg.data.val_fraction = 24, 64, 0.25
    cfg.run.adapter_name = f"{family}-sft"
    result = train(cfg)
    assert result.status == "done" and result.steps == 2
    pairs = tmp / "pairs.jsonl"
    rows = [
        {"prompt": QUESTION, "chosen": "It ships today.", "rejected": "No idea."},
        {
            "prompt": [{"role": "user", "content": "Refund please"}],
            "chosen": "Refunded.",
            "rejected": "No.",
        },
    ]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pref = train_preference(
        PreferenceConfig(
            cfg.run.adapter_name, str(pairs), method="cpo", max_steps=1, batch_size=2, max_length=64
        )
    )
    session = ModelSession(str(model_dir), dtype="float32")
    report = evaluate(
        session,
        [cfg.run.adapter_name, pref.name],
        cfg.data.path,
        max_samples=2,
        batch_size=2,
        settings=GenerationSettings(max_new_tokens=4),
        golden=None,
    )
    return {
        "dir": model_dir,
        "sft": cfg.run.adapter_name,
        "cpo": pref.name,
        "report": report,
        "session": session,
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_trains_prefers_passes_the_gate_check_and_is_shelved(family, tuned):
    from adapters.shelf.store import Shelf

    run = tuned(family)
    report = run["report"]
    assert set(report.models) == {"base", run["sft"], run["cpo"]}
    for name in (run["sft"], run["cpo"]):
        assert report.gate[name]["state"] in ("passed", "failed")  # a verdict, recorded below
    entries = {e.name: e for e in Shelf().list()}
    sft, cpo = entries[run["sft"]], entries[run["cpo"]]
    assert sft.ok and cpo.ok, (sft.reason, cpo.reason)
    assert cpo.manifest["lineage"]["parent"] == run["sft"]
    assert sft.manifest["gate"]["state"] == report.gate[run["sft"]]["state"]
    projections = {"phi3": ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]}
    expected = projections.get(
        family, ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    )
    assert sorted(sft.lora["target_modules"]) == expected


def _prompt_ids(model_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    from core.templates import encode_chat

    return encode_chat(AutoTokenizer.from_pretrained(model_dir), QUESTION)


def _plain_greedy(model_dir: Path, adapter: Path, ids: list[int]) -> list[int]:
    """Greedy tokens from transformers + PEFT as they are (no TuneDesk path), up to a stop."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.templates import end_of_turn_ids

    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), adapter
    )
    stops = end_of_turn_ids(AutoTokenizer.from_pretrained(model_dir))
    with torch.no_grad():
        out = model.eval().generate(
            torch.tensor([ids]),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=stops,
            pad_token_id=stops[0],
        )
    new = out[0, len(ids) :].tolist()
    return next((new[:i] for i, t in enumerate(new) if t in stops), new)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_session_answers_the_plain_greedy_tokens(family, tuned, shelf_home):
    """Chat's and evaluation's path (packed linear layers, the adapter merged for the call)
    against transformers + PEFT as they are, every family, sliding windows included."""
    from inference.generate import GenerationSettings, compare

    run = tuned(family)
    want = _plain_greedy(run["dir"], shelf_home / "adapters" / run["sft"], _prompt_ids(run["dir"]))
    (answer,) = compare(
        run["session"], QUESTION, [run["sft"]], GenerationSettings(max_new_tokens=NEW_TOKENS)
    )
    assert answer.text == run["session"].tokenizer.decode(want, skip_special_tokens=True)
    assert answer.tokens == len(want)


def _ask(url: str, model: str, timeout: float = 60) -> dict:
    body = {"model": model, "messages": QUESTION, "max_tokens": NEW_TOKENS, "temperature": 0}
    body["knowledge"] = "off"  # the plain tokens: trained adapters are grounded unless asked
    reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("family", FAMILIES)
def test_v1_on_pytorch_answers_the_plain_greedy_tokens(family, tuned, shelf_home):
    from serve.engines import Engines

    run = tuned(family)
    ids = _prompt_ids(run["dir"])
    want = _plain_greedy(run["dir"], shelf_home / "adapters" / run["sft"], ids)
    tok = run["session"].tokenizer
    with serving(api_app(Engines(run["session"], "pytorch"))) as url:
        answer = _ask(url, run["sft"], timeout=120)
    assert "pytorch" in answer["system_fingerprint"]
    assert answer["choices"][0]["message"]["content"] == tok.decode(want, skip_special_tokens=True)
    assert answer["usage"]["completion_tokens"] in (len(want), len(want) + 1)  # + the stop token


@pytest.mark.parametrize("family", FAMILIES)
def test_llama_cpp_converts_serves_and_answers_pytorchs_greedy_tokens(family, tuned, shelf_home):
    from core.llama_cpp import one_shot
    from serve.engines import Engines
    from serve.llama_server.factory import make_llama_engine

    run = tuned(family)
    # The GGUF export: base (f16) and LoRA by llama.cpp's own converters, with its Modelfile.
    result = run["export"].result()
    names = sorted(f.file for f in result.files)
    assert "base-f16.gguf" in names and "Modelfile.lora" in names, names
    lora = next(result.folder / n for n in names if n.endswith("-lora-f16.gguf"))
    llama_or_skip()
    ids = _prompt_ids(run["dir"])
    want = _plain_greedy(run["dir"], shelf_home / "adapters" / run["sft"], ids)
    if family in LLAMA_CPP_REFUSES:
        _pytorch_answers_when_llama_cpp_cannot(run, want)
        return
    with served(result.folder / "base-f16.gguf", lora) as server:
        got, _ = one_shot.greedy(server, ids, NEW_TOKENS, lora=0)
    assert got[: len(want)] == want, (family, got, want)
    # The app's own llama.cpp engine on the same (cached) files, answering /v1.
    engines = Engines(
        run["session"],
        "llama.cpp",
        llama_factory=lambda session, queue: make_llama_engine(session, queue, "f16"),
    )
    engines.prepare()
    llama = engines.llama()
    assert llama is not None, engines.llama_error
    try:
        with serving(api_app(engines)) as url:
            answer = _ask(url, run["sft"])
    finally:
        llama.close()
    assert "llama.cpp" in answer["system_fingerprint"]
    assert answer["choices"][0]["message"]["content"] == run["session"].tokenizer.decode(
        want, skip_special_tokens=True
    )


def _pytorch_answers_when_llama_cpp_cannot(run: dict, want: list[int]) -> None:
    """llama-server cannot load the family's GGUF: the app says why in one line and
    PyTorch answers the request asked of llama.cpp."""
    from serve.engines import Engines
    from serve.llama_server.factory import make_llama_engine

    engines = Engines(
        run["session"],
        "llama.cpp",
        llama_factory=lambda session, queue: make_llama_engine(session, queue, "f16"),
    )
    engines.prepare()
    assert engines.llama() is None
    reason = engines.llama_error
    assert (
        reason.startswith("failed to start: LlamaServerError: llama-server exited")
        and "\n" not in reason
    )
    assert "failed to load model" in reason, reason
    with serving(api_app(engines)) as url:
        answer = _ask(url, run["sft"])
    assert "pytorch" in answer["system_fingerprint"]
    assert answer["choices"][0]["message"]["content"] == run["session"].tokenizer.decode(
        want, skip_special_tokens=True
    )
