"""Shared fixtures: tiny llama- and gpt2-architecture models and a tokenizer, built from configs.

Nothing here touches the network: HF_HUB_OFFLINE is forced on before transformers loads.
The tokenizer is a small byte-level BPE trained on a few support sentences. Byte-level (not
word-level) so decoding is lossless: tests can check that label tokens decode back to the
exact response text.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _own_cores_per_worker() -> None:
    """Under pytest-xdist (`make test` runs two workers), each worker, and every process it
    starts (training runs, llama-server), keeps to its own share of the cores: two PyTorch
    threads on a core another process also uses stall each other (docs/benchmarks.md). Runs
    before torch loads, so its thread pool is sized for the share."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores, index = sorted(os.sched_getaffinity(0)), int(worker[2:])
    if len(cores) >= count:
        os.sched_setaffinity(0, cores[index % count :: count])
    else:  # more workers than cores: each on one core, the cores shared round-robin
        os.sched_setaffinity(0, [cores[index % len(cores)]])


_own_cores_per_worker()


def _file_weight(items: list) -> int:
    """0 for a file that drives the browser, 1 that uses the real default model, 2 for the
    end-to-end and fault-injection folders, else 3: the heaviest files go first."""
    marks = {mark.name for item in items for mark in item.iter_markers()}
    if "browser" in marks:
        return 0
    if "slow" in marks:
        return 1
    return 2 if items[0].path.parent.name in ("e2e", "reliability") else 3


# What a file never timed is guessed to take, by its weight above (seconds).
GUESSED_SECONDS = {0: 120.0, 1: 60.0, 2: 30.0, 3: 1.0}
FILE_SECONDS_KEY = "tunedesk/file_seconds"  # in pytest's cache (.pytest_cache), per test file


# Folders whose files share a session fixture that costs more than their tests (the llama
# fixture of tests/serve/llama_server/: a tiny model's GGUFs and a llama-server, ~25 s on one
# core): `make test` gives all of a folder's files to one worker, so the fixture is made once.
SHARED_FIXTURE_FOLDERS = ("tests/serve/llama_server/",)


def schedule_group(file: str) -> str:
    """What one worker runs as a whole: the test file, or its folder where that shares a
    costly session fixture (``file`` as in a node id: ``tests/x/test_y.py``)."""
    return next((folder for folder in SHARED_FIXTURE_FOLDERS if file.startswith(folder)), file)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` hands out :func:`schedule_group` groups instead of single files."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_group(nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items: list) -> None:
    """Longest groups first (the order is stable otherwise): `make test`'s workers take whole
    files, or :func:`schedule_group`'s folders (``--dist loadfile --no-loadscope-reorder``), as
    they free up, so a minutes-long file met last would leave one worker waiting on the other.
    How long a file takes is what it took in the last run that ran it (kept by
    :func:`pytest_sessionfinish`); a file never timed is guessed from its weight. Every worker
    reads the same record, so all collect the same order."""
    cache = getattr(config, "cache", None)  # None under `-p no:cacheprovider`
    timed = cache.get(FILE_SECONDS_KEY, {}) if cache else {}
    by_file: dict = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    groups: dict = {}
    for file, group in by_file.items():
        seconds = timed.get(file, GUESSED_SECONDS[_file_weight(group)])
        entry = groups.setdefault(schedule_group(file), [0.0, []])
        entry[0] += seconds
        entry[1].extend(group)
    ordered = sorted(groups.values(), key=lambda entry: -entry[0])
    items[:] = [item for _, group in ordered for item in group]


_ran_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    """Each file's time (setup, call and teardown of its tests), as the controller sees it."""
    key = report.nodeid.split("::")[0]
    _ran_seconds[key] = _ran_seconds.get(key, 0.0) + report.duration


def pytest_sessionfinish(session) -> None:
    """Keep this run's file times for the next run's order (files not run keep their record);
    only the controller writes, once, after every worker has reported."""
    cache = getattr(session.config, "cache", None)
    if os.environ.get("PYTEST_XDIST_WORKER") or cache is None or not _ran_seconds:
        return
    timed = cache.get(FILE_SECONDS_KEY, {})
    timed.update({k: round(v, 2) for k, v in _ran_seconds.items()})
    cache.set(FILE_SECONDS_KEY, timed)


from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = [
    "How do I track my order? You can track your order with the tracking link in your email.",
    "I want a refund for order {{Order Number}}. I am sorry to hear that; I can help you get a "
    "refund.",
    "Where is my invoice? Your invoice is in your account under Orders.",
    "hi i need to talk to a human agent. I will connect you with a human agent right away.",
    "Can I change my shipping address? Yes, you can change the shipping address before it ships.",
    "What payment methods do you accept? We accept credit cards, PayPal and bank transfer.",
    "please cancel my order asap. I have cancelled your order and you will get an email.",
    "The quick brown fox jumps over the lazy dog 0123456789 !?.,;:'\"()[]{}<>-_/\\@#$%&*+=",
]


def _train_tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>" if chat_template else "<|endoftext|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    if chat_template:
        fast.chat_template = chat_template
    return fast


def _save_tiny(folder: Path, arch: str) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    torch.manual_seed(0)
    tok = _train_tokenizer(CHATML_TEMPLATE if arch == "llama" else None)
    vocab = len(tok)
    if arch == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=True,
        )
    else:
        config = GPT2Config(
            vocab_size=vocab,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=256,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A 2-layer llama-style model folder with a ChatML chat template."""
    return _save_tiny(tmp_path_factory.mktemp("tiny-llama"), "llama")


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    """A 2-layer GPT-2 model folder with no chat template (exercises the fallback)."""
    return _save_tiny(tmp_path_factory.mktemp("tiny-gpt2"), "gpt2")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh TUNEDESK_HOME for one test."""
    root = tmp_path / "home"
    monkeypatch.setenv("TUNEDESK_HOME", str(root))
    return root


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory):
    """The real default model (SmolLM2-135M-Instruct), converted once per test session.

    Uses the developer's cache when TUNEDESK_TEST_MODEL_CACHE points at a TuneDesk home.
    """
    from core import models

    cache = os.environ.get("TUNEDESK_TEST_MODEL_CACHE")
    root = Path(cache) if cache else tmp_path_factory.mktemp("model-home")
    old = os.environ.get("TUNEDESK_HOME")
    os.environ["TUNEDESK_HOME"] = str(root)
    try:
        resolved = models.resolve(models.DEFAULT_MODEL)
    except models.ModelNotFoundError as err:
        pytest.skip(f"default model unavailable: {err}")
    finally:
        if old is None:
            os.environ.pop("TUNEDESK_HOME", None)
        else:
            os.environ["TUNEDESK_HOME"] = old
    return resolved


BITEXT_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "bitext"


@pytest.fixture(scope="session")
def bitext_dir() -> Path:
    """The real Bitext data beside the checkout; tests skip cleanly without it."""
    if not BITEXT_DIR.is_dir():
        pytest.skip(f"Bitext data not found at {BITEXT_DIR}")
    return BITEXT_DIR


ROOT = Path(__file__).resolve().parents[1]

from run_helpers import tiny_run_config, wait_until  # noqa: E402, F401  (old name: import from run_helpers)


@pytest.fixture(scope="session")
def family_dir(default_model_dir, tmp_path_factory):
    """``family_dir("qwen3")``: a tiny random model of one of the six families in
    tests/family_models.py (with the default model's tokenizer and the family's own template),
    built once per session."""
    from family_models import build_family

    built: dict[str, Path] = {}

    def build(family: str) -> Path:
        if family not in built:
            built[family] = build_family(
                family, tmp_path_factory.mktemp(f"family-{family}"), default_model_dir.path
            )
        return built[family]

    return build


@pytest.fixture(scope="session")
def varied_dir(tiny_llama_dir, tmp_path_factory) -> Path:
    """The tiny llama with larger random weights, so greedy answers are varied text
    (the 0.02-std init answers "\\n" forever, which any model would match)."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("varied-llama")
    shutil.copytree(tiny_llama_dir, folder, dirs_exist_ok=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.2)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def random_lora_dir(tiny_llama_dir, tmp_path_factory) -> Path:
    """A saved LoRA adapter on the tiny llama (non-zero B, so it really changes the logits)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    folder = tmp_path_factory.mktemp("peft") / "adapter"
    get_peft_model(base, config).save_pretrained(folder)
    return folder
