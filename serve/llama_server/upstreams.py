"""The llama-servers a request can go to, and the switch to a new LoRA list that drops nothing.

Upstreams are the local llama-server this app starts plus any servers named in
``TUNEDESK_LLAMA_UPSTREAMS`` (comma-separated URLs: other machines, started by their owners
with the same GGUF files; ``TUNEDESK_LLAMA_UPSTREAMS_KEY``: the ``--api-key`` they were started
with). The local server's own random key goes with every request to it (``headers``). A request
goes to the upstream with the fewest requests in flight among those that hold its LoRA file. A LoRA
file is known by its folder and name (``<adapter_hash>/<adapter>-lora-f16.gguf``), so a copy on
another machine matches.

llama-server reads its LoRA list once, at start. When a request needs a LoRA file that no
upstream holds (an adapter trained, imported or renamed since), a new local server starts
beside the running one with the longer list; requests go to it once it is healthy, and the old
process stops when its last request in flight ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from core.llama_cpp.process import LlamaServerError, LlamaServerProcess


def lora_key(path: str | Path) -> str:
    """How a LoRA file is known on every upstream: its folder (the adapter hash) and name."""
    path = Path(path)
    return f"{path.parent.name}/{path.name}"


@dataclass(eq=False)
class Upstream:
    """One llama-server: where it is, which LoRA files it holds (key -> id), its load."""

    url: str
    loras: dict[str, int]
    process: LlamaServerProcess | None = None
    inflight: int = 0
    headers: dict = field(default_factory=dict)  # its key: Authorization: Bearer ...
    retired: bool = field(default=False)

    def lora_id(self, lora: Path | None) -> int | None:
        return None if lora is None else self.loras[lora_key(lora)]

    def lora_scales(self, lora: Path | None) -> list[dict]:
        """A request's ``lora`` field: ``lora`` at scale 1, every other file named at scale 0
        (a request that names none gets the server's start-up scales, not the base)."""
        chosen = self.lora_id(lora)
        return [
            {"id": i, "scale": 1.0 if i == chosen else 0.0} for i in sorted(self.loras.values())
        ]


def remote_upstream(url: str, timeout: float = 10.0, key: str | None = None) -> Upstream:
    """An upstream started elsewhere (``key``: its ``--api-key``); its LoRA ids read from its
    ``/lora-adapters``.

    Raises:
        LlamaServerError: it does not answer as a llama-server does.
    """
    url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        listed = (
            httpx.get(f"{url}/lora-adapters", headers=headers, timeout=timeout)
            .raise_for_status()
            .json()
        )
    except (httpx.HTTPError, ValueError) as err:
        raise LlamaServerError(f"upstream {url} does not answer /lora-adapters: {err}") from None
    return Upstream(url, {lora_key(a["path"]): int(a["id"]) for a in listed}, headers=headers)


class Upstreams:
    """The pool: a local llama-server (replaced when its LoRA list must grow) and remotes.

    Args:
        start_local: starts a local llama-server with the given LoRA files (None: remotes only).
        remotes: URLs of llama-servers started elsewhere.
        remote_key: the ``--api-key`` the remotes were started with (None: they have none).
    """

    def __init__(
        self,
        start_local: Callable[[list[Path]], LlamaServerProcess] | None,
        remotes: list[str] = (),
        remote_key: str | None = None,
    ):
        self._start_local = start_local
        self._remotes = [remote_upstream(url, key=remote_key) for url in remotes]
        self._local: Upstream | None = None
        self._lock = threading.Lock()  # the counts and the current local upstream
        self._growing = threading.Lock()  # one new local server at a time
        self.started: list[Callable[[], None]] = []  # called after a new local server replaced one

    def start(self, loras: list[Path]) -> None:
        """Start the local server (if any) with ``loras``."""
        if self._start_local is not None:
            self._replace_local(list(dict.fromkeys(loras)))

    @property
    def all(self) -> list[Upstream]:
        with self._lock:
            return ([self._local] if self._local else []) + list(self._remotes)

    def acquire(self, lora: Path | None, known: Callable[[], list[Path]] = list) -> Upstream:
        """The least busy upstream holding ``lora``, counted in flight until :meth:`release`.
        A LoRA no upstream holds starts a new local server with it and the files ``known()``
        still lists.

        Raises:
            LlamaServerError: no upstream holds it and none could be started.
        """
        upstream = self._pick(lora)
        if upstream is None:
            if self._start_local is None:
                raise LlamaServerError(f"no llama-server upstream holds {lora_key(lora)}")
            with self._growing:
                if self._pick(lora, count=False) is None:
                    self._replace_local(list(dict.fromkeys([*known(), lora])))
            upstream = self._pick(lora)
        return upstream

    def ready(self, lora: Path | None) -> Upstream | None:
        """As :meth:`acquire` when an upstream holds ``lora`` already (never blocks), else None."""
        return self._pick(lora)

    def release(self, upstream: Upstream) -> None:
        with self._lock:
            upstream.inflight -= 1
            stop = upstream.retired and upstream.inflight == 0
        if stop and upstream.process is not None:
            upstream.process.stop()

    def close(self) -> None:
        with self._lock:
            local, self._local = self._local, None
        if local and local.process:
            local.process.stop()

    def _pick(self, lora: Path | None, count: bool = True) -> Upstream | None:
        key = None if lora is None else lora_key(lora)
        with self._lock:
            holders = [
                u
                for u in ([self._local] if self._local else []) + self._remotes
                if key is None or key in u.loras
            ]
            if not holders:
                return None
            best = min(holders, key=lambda u: u.inflight)
            if count:
                best.inflight += 1
            return best

    def _replace_local(self, loras: list[Path]) -> None:
        process = self._start_local(loras).start()
        fresh = Upstream(
            process.url,
            {lora_key(p): i for i, p in enumerate(loras)},
            process,
            headers=process.headers,
        )
        with self._lock:
            old, self._local = self._local, fresh
            if old is not None:
                old.retired = True
                stop_now = old.inflight == 0
        if old is not None and stop_now and old.process is not None:
            old.process.stop()
        if old is not None:  # its prompt cache went with it
            for listener in list(self.started):
                listener()
