"""An adapter's answer never starts from a prompt state another adapter computed, and starts
from its own where one was saved.

llama-server's prompt cache in host memory (``--cache-ram``) restores a saved prompt by its
tokens alone upstream (llama.cpp issue #26207): adapter b asked the prompt adapter a read a
moment before reused a's keys and values and answered otherwise than it does on a cold server.
TuneDesk's build of llama-server keys each saved state by the adapters it was read with
(patches/llama-server-prompt-cache-per-adapter.patch): b reads the prompt anew, and a asked it
again starts from its own saved state. A state the memory tier has no room for moves to the
server's folder on disk and is read back, the answer unchanged
(patches/llama-server-prompt-cache-spill-to-disk.patch).
"""

from __future__ import annotations

import httpx

from core.llama_cpp.one_shot import greedy
from core.llama_cpp.process import LlamaServerProcess
from core.llama_cpp.prompt_cache import cache_ram_mib
from inference.generate import encode

# Long enough that the saved state is worth restoring (llama-server keeps one that covers a
# quarter or more of the new prompt), as a support conversation with its system prompt is.
POLICY = (
    "You answer for an online shop. Orders ship in two days; refunds take five to seven "
    "business days after the parcel reaches the warehouse; the address can change until the "
    "order ships. Be brief and polite. "
) * 3


def _chat(session, question: str, system: str = POLICY) -> list[int]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return encode(session, [messages])["input_ids"][0].tolist()


def _answer(server: LlamaServerProcess, ids: list[int], lora: int) -> dict:
    """A greedy answer with the prompt cache on, as the serving engine asks."""
    body = {
        "prompt": ids,
        "n_predict": 12,
        "top_k": 1,
        "samplers": ["top_k"],
        "cache_prompt": True,
        "return_tokens": True,
        "lora": [{"id": i, "scale": 1.0 if i == lora else 0.0} for i in range(2)],
    }
    reply = httpx.post(f"{server.url}/completion", json=body, headers=server.headers, timeout=300)
    reply.raise_for_status()
    return reply.json()


def test_an_adapter_never_starts_from_the_prompt_another_adapter_read(
    llama, llama_session, tmp_path
):
    local = llama.upstreams.all[0].process
    loras = [llama.lora_path("a"), llama.lora_path("b")]
    server = LlamaServerProcess(
        local.binary, local.model, loras, slots=1, ctx_per_slot=1024, threads=2,
        log=tmp_path / "llama.log", flash_attn="off",
    )  # fmt: skip
    server.repack = local.repack  # as the shared server runs on this machine
    command = server.command()
    assert command[command.index("--cache-ram") + 1] == str(cache_ram_mib())  # the cache is on
    refund, address = (
        _chat(llama_session, "Where is my refund?"),
        # Another system prompt: the prompts share a few template tokens, too few for the slot to
        # be picked by its prompt, so llama-server saves the slot's prompt and looks for a better
        # one among those it saved.
        _chat(llama_session, "Can I change my address?", "Be brief."),
    )
    with server.start():
        cold = greedy(server, refund, 12, lora=1)[0]  # b on a fresh server: its own answer
    with server.start():
        by_a = _answer(server, refund, lora=0)
        _answer(server, address, lora=1)  # the slot moves on; a's prompt state is saved
        again = _answer(server, refund, lora=1)  # b on the prompt a read
        a_again = _answer(server, refund, lora=0)  # a on it again, b's state saved meanwhile
    assert by_a["tokens"] != cold  # the adapters answer differently: a leak would show
    assert again["tokens"] == cold
    assert again["timings"]["prompt_n"] > len(refund) // 2  # read again, not restored
    assert a_again["tokens"] == by_a["tokens"]
    assert a_again["timings"]["prompt_n"] < 4  # a's own saved state, restored


def _policies(count: int) -> list[str]:
    """``count`` long system prompts that differ from their first word on."""
    return [f"Policy {i}. " + POLICY * 3 for i in range(count)]


def test_a_state_memory_has_no_room_for_moves_to_disk_and_is_read_back(
    llama, llama_session, tmp_path, monkeypatch
):
    # 1 MiB of memory holds about nine of these prompts' states (~400 tokens at 256 bytes each
    # on this model; its context is 512): of sixteen, the first is pushed out. With the disk
    # tier it is read back (the answer the same, its prompt restored); with the tier off it is
    # gone and read anew.
    monkeypatch.setenv("TUNEDESK_LLAMA_CACHE_MIB", "1")
    local = llama.upstreams.all[0].process
    prompts = [_chat(llama_session, "Where is my refund?", p) for p in _policies(16)]
    assert all(350 < len(ids) < 490 for ids in prompts), [len(ids) for ids in prompts]
    results = {}
    for disk in ("64", "0"):
        monkeypatch.setenv("TUNEDESK_LLAMA_CACHE_DISK_MIB", disk)
        server = LlamaServerProcess(
            local.binary, local.model, [llama.lora_path("a"), llama.lora_path("b")], slots=1,
            ctx_per_slot=2048, threads=2, log=tmp_path / f"llama-{disk}.log", flash_attn="off",
        )  # fmt: skip
        server.repack = local.repack
        with server.start():
            folder = server.cache_disk
            first = _answer(server, prompts[0], lora=0)
            for ids in prompts[1:]:
                _answer(server, ids, lora=0)
            files = sorted(p.name for p in folder.iterdir()) if folder else []
            again = _answer(server, prompts[0], lora=0)
        results[disk] = (first, again, files, folder)
    first, again, files, folder = results["64"]
    assert files and all(f.startswith("state-") and f.endswith(".bin") for f in files)
    assert again["tokens"] == first["tokens"]
    assert again["timings"]["prompt_n"] < 4  # restored from its file
    assert not folder.exists()  # the server's folder goes with it
    first, again, files, folder = results["0"]
    assert folder is None and files == []
    assert again["tokens"] == first["tokens"]
    assert again["timings"]["prompt_n"] > len(prompts[0]) // 2  # dropped, so read anew
