"""The llama.cpp engine built from a session: its GGUF files converted once by the export code,
a local llama-server started under them, remote upstreams from ``TUNEDESK_LLAMA_UPSTREAMS``."""

from __future__ import annotations

import os

from inference.session import ModelSession


def make_llama_engine(
    session: ModelSession,
    max_queue: int = 64,
    outtype: str = "q8_0",
    slots: int = 16,
    ctx_per_slot: int = 2048,
    flash_attn: str | None = None,
    adapters: list[str] | None = None,
):
    """llama-server over the session's base model and every whole adapter on its shelf (or only
    ``adapters``), as GGUFs converted once by the export code; remotes from
    ``TUNEDESK_LLAMA_UPSTREAMS``. ``flash_attn``: llama-server's ``-fa`` (default
    ``TUNEDESK_LLAMA_FLASH_ATTN`` or ``auto``)."""
    from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
    from adapters.shelf.store import Shelf
    from core.llama_cpp.binaries import missing_reason, server_binary
    from core.llama_cpp.decode_check import decode_threads
    from core.llama_cpp.process import LlamaServerProcess
    from inference.session import physical_cores
    from serve.llama_server.engine import LlamaServerEngine
    from serve.llama_server.upstreams import Upstreams

    binary = server_binary()
    if binary is None:
        raise RuntimeError(missing_reason())
    session.load()
    home = session.adapter_folder("probe").parent.parent  # the session's shelf, wherever it is
    base = ensure_base_gguf(session.resolved, outtype, home=home)
    known: dict[tuple, object] = {}

    folders: dict[str, object] = {}

    def lora_file(name: str):
        # The checks and ensure_lora_gguf (which hashes the weights) run again only when the
        # adapter's files change: per request they cost a third of the gateway's own CPU.
        folder = folders.get(name) or folders.setdefault(name, session.adapter_folder(name))
        key = (name, *file_stamps(folder))
        if key not in known:
            session.check_usable(name)
            known[key] = ensure_lora_gguf(name, home=home)
        return known[key]

    decode: list[int] = []  # measured at the first start (once per machine, then remembered)

    def start_local(loras):
        log = home / "logs" / f"llama-server-{os.getpid()}.log"
        threads = physical_cores()
        if not decode:
            decode.append(decode_threads(binary, base, threads, log))
        return LlamaServerProcess(
            binary,
            base,
            loras,
            slots=slots,
            ctx_per_slot=ctx_per_slot,
            threads=threads,
            decode_threads=decode[0],
            log=log,
            flash_attn=flash_attn or os.environ.get("TUNEDESK_LLAMA_FLASH_ATTN", "auto"),
        )

    remotes = [u for u in os.environ.get("TUNEDESK_LLAMA_UPSTREAMS", "").split(",") if u.strip()]
    upstreams = Upstreams(
        start_local, remotes, os.environ.get("TUNEDESK_LLAMA_UPSTREAMS_KEY") or None
    )
    shelf = Shelf()
    shelf.root, shelf.home = home / "adapters", home  # the session's shelf, as the API lists it
    whole = [e.name for e in shelf.list() if e.ok] if adapters is None else list(adapters)
    engine = LlamaServerEngine(
        session,
        upstreams,
        lora_file,
        ctx_per_slot=ctx_per_slot,
        max_inflight=max_queue + slots,
        label=f"llama.cpp {outtype}",
    )
    upstreams.start([engine.known_file(n) for n in whole if engine.known_file(n) is not None])
    local = next((u.process for u in upstreams.all if u.process is not None), None)
    if local is not None and local.note:  # repacking failed its check here (or was turned off)
        engine.label, engine.note = f"{engine.label}, --no-repack", local.note
    return engine


def file_stamps(folder) -> tuple[int, ...]:
    from inference.session import MANIFEST, WEIGHTS

    try:
        return tuple(
            (folder / f).stat().st_mtime_ns for f in (MANIFEST, WEIGHTS, "adapter_config.json")
        )
    except OSError as err:
        raise ValueError(f"adapter {folder.name!r} is not on the shelf ({err.strerror})") from None
