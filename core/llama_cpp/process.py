"""One ``llama-server`` child process: the base GGUF, a fixed list of LoRA GGUFs, a local port.

The LoRA files are loaded at start, each at scale 0 (``--lora-init-without-apply``); a request
picks its adapter with ``"lora": [{"id": i, "scale": 1}]``. The list cannot change while the
server runs, so a new adapter means a new process beside this one (serve/llama_server/upstreams.py).

Only the app can talk to it: each process gets its own random key (llama-server's
``--api-key``, passed in its environment so ``ps`` does not show it) and every request sends
``Authorization: Bearer <key>`` (:attr:`LlamaServerProcess.headers`); without it, llama-server
answers 401 to everything but ``/health``. The port is chosen free, then bound by the child: one
taken in between is found (the child says it could not bind, or what answers on the port does
not know the key and the model) and another is tried.

llama-server keeps the prompts its slots let go in host memory (``--cache-ram``:
:func:`core.llama_cpp.prompt_cache.cache_ram_mib`, half the machine's memory, at least 8 GiB),
and TuneDesk's build moves those memory has no room for to a folder of the server's own
(``--cache-disk``: :mod:`core.llama_cpp.prompt_cache`); a new request starts from the saved
state that shares the longest beginning with it. Upstream, a state is found by its
tokens alone, so an answer by one adapter could start from keys and values another adapter (or
the base model) computed, and differ from its own (llama.cpp issue #26207). ``make llama``
builds llama-server with ``patches/llama-server-prompt-cache-per-adapter.patch``: a saved state
is restored only for the adapters it was read with
(``tests/serve/llama_server/test_adapter_cache.py``). Any other llama-server that holds LoRA
files runs without that cache (``--cache-ram 0``); each slot still reuses its own last prompt,
which llama-server drops when the next request picks another adapter.

One request's tokens are decoded on ``decode_threads`` threads (``-t``), prompts and the
batched tokens of several requests on all ``threads`` (``-tb``). The app's servers take the
count measured on this machine (:mod:`core.llama_cpp.decode_check`); a server started without
one takes :func:`decode_threads_for`.

On a CPU with AMX, llama.cpp's weight repacking is much faster where it works and crashes or
hangs the server where it does not (machine-dependent: llama.cpp issue #20824): the first
start on such a machine checks it under short deadlines and falls back to ``--no-repack`` with
a sentence (:mod:`core.llama_cpp.repack_check`); later starts reuse the verdict.

One-shot requests for checks (GGUF export's agreement with PyTorch, the tests) are in
:mod:`core.llama_cpp.one_shot`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from core.llama_cpp import repack_check
from core.llama_cpp.binaries import amx_cpu, keys_prompt_cache_by_adapter
from core.llama_cpp.prompt_cache import cache_ram_mib, kept_mib, new_disk_folder

log = logging.getLogger(__name__)
PORT_TRIES = 3  # ports tried when the chosen one is taken before the child binds it
BIND_FAILED = "couldn't bind HTTP server socket"  # what llama-server logs when the port is taken

# llama-server runs under a small shell that stops it when the app's process is gone, however
# it ended (a SIGKILL, a SIGTERM Python does not turn into atexit): no server outlives its app.
WATCHDOG = """parent=$1; shift
"$@" &
child=$!
trap 'kill $child 2>/dev/null; wait $child; exit 0' TERM INT HUP
while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1 & wait $!; done
kill $child 2>/dev/null
wait $child
"""


class LlamaServerError(RuntimeError):
    """llama-server did not start or stopped answering."""


DECODE_THREADS_ENV = "TUNEDESK_LLAMA_DECODE_THREADS"
FEW_CORES = 2  # up to this many threads, one request's tokens decode on one


def decode_threads_said() -> int | None:
    """The threads ``TUNEDESK_LLAMA_DECODE_THREADS`` asks for, or None where it is not set.

    Raises:
        ValueError: the variable is not a whole number of at least 1.
    """
    said = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if not said:
        return None
    if not said.isdigit() or int(said) < 1:
        raise ValueError(
            f"{DECODE_THREADS_ENV} must be a whole number of threads, at least 1, not {said!r}"
        )
    return int(said)


def decode_threads_for(threads: int) -> int:
    """Threads llama-server decodes one request's tokens on, of ``threads``, where nothing was
    measured: ``TUNEDESK_LLAMA_DECODE_THREADS`` where set, else 1 where ``threads`` is at most
    :data:`FEW_CORES` (safe beside busy cores), else all of them (llama.cpp's own choice). The
    servers the app starts measure instead (:mod:`core.llama_cpp.decode_check`).

    Raises:
        ValueError: the variable is not a whole number of at least 1.
    """
    said = decode_threads_said()
    if said is not None:
        return said
    return 1 if threads <= FEW_CORES else threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServerProcess:
    """A llama-server serving ``model`` with ``loras`` on 127.0.0.1.

    Args:
        binary: the llama-server executable.
        model: the base model GGUF.
        loras: LoRA GGUFs, in the order of their ids.
        slots: requests decoded together (continuous batching).
        ctx_per_slot: tokens of prompt plus answer one request may hold.
        threads: CPU threads for prompts and for several requests' tokens decoded together.
        decode_threads: CPU threads for one request's tokens (default :func:`decode_threads_for`).
        log: file that receives the server's own output.
        flash_attn: llama-server's ``-fa`` (``auto``, its default, or ``on`` / ``off``).
        api_key: the key requests must carry (default: a new random one; pass another
            process's key to have two servers answer to one).
    """

    def __init__(
        self,
        binary: Path,
        model: Path,
        loras: list[Path],
        *,
        slots: int = 16,
        ctx_per_slot: int = 2048,
        threads: int = 2,
        decode_threads: int | None = None,
        log: Path,
        flash_attn: str = "auto",
        api_key: str | None = None,
    ):
        self.binary, self.model, self.loras = Path(binary), Path(model), list(loras)
        self.slots, self.ctx_per_slot, self.threads, self.log = (
            slots,
            ctx_per_slot,
            threads,
            Path(log),
        )
        self.decode_threads = decode_threads or decode_threads_for(threads)
        self.flash_attn = flash_attn
        self.api_key = api_key or secrets.token_urlsafe(32)
        self.headers = {"Authorization": f"Bearer {self.api_key}"}  # what every request sends
        self._use_port(free_port())
        self._proc: subprocess.Popen | None = None
        self.repack: bool | None = None  # llama.cpp's weight repacking; decided at start
        # the prompt cache's folder on disk and its MiB, while the server runs (None: none)
        self.cache_disk: Path | None = None
        self.cache_disk_mib = 0
        self.note = ""  # why repacking is off, when it is

    def command(self) -> list[str]:
        cmd = [
            str(self.binary),
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-np",
            str(self.slots),
            "-c",
            str(self.slots * self.ctx_per_slot),
            "-t",
            str(self.decode_threads),
            "-tb",
            str(self.threads),
            "--metrics",
            "--no-webui",
            "-fa",
            self.flash_attn,
        ]
        if self.loras:
            cmd += ["--lora", ",".join(str(p) for p in self.loras), "--lora-init-without-apply"]
        if self.loras and not keys_prompt_cache_by_adapter(self.binary):
            cmd += ["--cache-ram", "0"]  # no prompt state shared across adapters (see above)
        else:
            cmd += ["--cache-ram", str(cache_ram_mib())]
            if self.cache_disk is not None:
                cmd += ["--cache-disk", str(self.cache_disk)]
                cmd += ["--cache-disk-mib", str(self.cache_disk_mib)]
        if not self.repack_allowed():
            cmd.append("--no-repack")
        return cmd

    def repack_allowed(self) -> bool:
        """Whether this server may repack weights: the operator's choice where given; else yes
        off AMX CPUs and, on them, the machine's remembered check (not asked yet: yes, and
        start() asks)."""
        if self.repack is not None:
            return self.repack
        verdict = self._decided()
        return verdict.repack if verdict else True

    def _decided(self) -> repack_check.Verdict | None:
        # The operator's choice holds on every CPU (``TUNEDESK_LLAMA_AMX=0`` forces the
        # fallback where repacking works, as the tests do); a remembered check only on AMX.
        verdict = repack_check.forced()
        if verdict is None and amx_cpu():
            verdict = repack_check.remembered(self.binary)
        return verdict

    def start(self, timeout: float = 120.0) -> LlamaServerProcess:
        """Start the process and wait until ``/health`` answers 200 (on an AMX CPU whose
        repacking was never checked, check it first: see :mod:`core.llama_cpp.repack_check`).

        Raises:
            LlamaServerError: it exited or did not get ready in ``timeout`` seconds (with the
                last lines of its log).
        """
        verdict = self._decided()
        if verdict is None and amx_cpu():
            return self._start_checking_repack(timeout)
        self.repack, self.note = (verdict.repack, verdict.reason) if verdict else (True, "")
        return self._launch(timeout)

    def _start_checking_repack(self, timeout: float) -> LlamaServerProcess:
        self.repack = True
        try:
            self._launch(min(timeout, repack_check.CHECK_READY_SECONDS))  # a hang ends here
            body = {
                "prompt": "Hello",
                "n_predict": 8,
                "top_k": 1,
                "samplers": ["top_k"],
                "cache_prompt": False,
            }
            httpx.post(
                f"{self.url}/completion",
                json=body,
                headers=self.headers,
                timeout=repack_check.CHECK_DECODE_SECONDS,
            ).raise_for_status()
            repack_check.remember(self.binary, repack_check.Verdict(True))
            return self
        except (LlamaServerError, httpx.HTTPError) as error:
            problem = self._problem(error)
            self.stop()
        self.repack, self.note = False, repack_check.fallback_sentence(problem)
        log.warning(self.note)
        with open(self.log, "a") as out:
            out.write(f"tunedesk: {self.note}\n")
        self._launch(timeout)  # raises as before when the server fails without repacking too
        repack_check.remember(self.binary, repack_check.Verdict(False, self.note))
        return self

    def _problem(self, error: Exception) -> str:
        if isinstance(error, LlamaServerError) and "was not ready" in str(error):  # stopped since
            return f"llama-server was not ready within {repack_check.CHECK_READY_SECONDS:.0f} s"
        code = self._proc.poll() if self._proc else None
        if code is not None:
            number = code - 128 if code > 128 else -code
            with contextlib.suppress(ValueError):
                return f"llama-server died of {signal.Signals(number).name}"
            return f"llama-server exited with code {code}"
        if isinstance(error, httpx.TimeoutException):
            return f"its first tokens did not come within {repack_check.CHECK_DECODE_SECONDS:.0f} s"
        return f"its first tokens failed ({type(error).__name__}: {str(error)[:120]})"

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def cache_mib(self) -> int:
        """MiB this server's prompt cache may keep, in memory and on disk (as started, or as the
        next start would give it)."""
        if self.cache_disk is not None and cache_ram_mib() > 0:
            return cache_ram_mib() + self.cache_disk_mib
        return kept_mib(self.binary, bool(self.loras))

    def _launch(self, timeout: float) -> LlamaServerProcess:
        """Start the child and wait until it answers as ours; a port lost before the child bound
        it is given up for a new one (at most :data:`PORT_TRIES` ports)."""
        deadline = time.monotonic() + timeout
        if self.cache_disk is not None:  # a child that died left it: its files name nothing now
            shutil.rmtree(self.cache_disk, ignore_errors=True)
            self.cache_disk = None
        ram = cache_ram_mib()
        beyond = self.cache_mib() - ram  # the disk tier this build and setting give, found once
        if ram > 0 and beyond > 0:
            self.cache_disk, self.cache_disk_mib = new_disk_folder(), beyond
        for attempt in range(PORT_TRIES):
            if self._launch_once(deadline, timeout):
                return self
            log.warning(
                "llama-server could not bind port %d (taken since it was chosen); trying another",
                self.port,
            )
            if attempt < PORT_TRIES - 1:
                self._use_port(free_port())
        raise LlamaServerError(
            f"llama-server could not bind a port in {PORT_TRIES} tries: {self._tail()}"
        )

    def _launch_once(self, deadline: float, timeout: float) -> bool:
        """True once the child answers as ours; False when it could not bind its port.

        Raises:
            LlamaServerError: it exited for another reason, or was not ready by ``deadline``.
        """
        self.log.parent.mkdir(parents=True, exist_ok=True)
        start = self.log.stat().st_size if self.log.exists() else 0
        env = {
            **os.environ,
            "LLAMA_API_KEY": self.api_key,
        }  # not on the command line: ps shows that
        with open(self.log, "ab") as out:
            self._proc = subprocess.Popen(
                ["sh", "-c", WATCHDOG, "llama-server-watchdog", str(os.getpid()), *self.command()],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if BIND_FAILED in self._log_since(start):
                    return False
                raise LlamaServerError(
                    f"llama-server exited with code {self._proc.returncode}: {self._tail()}"
                )
            if self._answers_as_ours():
                return True
            time.sleep(0.1)
        self.stop()
        raise LlamaServerError(f"llama-server was not ready after {timeout:.0f} s: {self._tail()}")

    def _answers_as_ours(self) -> bool:
        """Whether what listens on the port is this child, ready: it takes our key and serves
        our model (another process that took the port knows neither)."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            reply = httpx.get(f"{self.url}/props", headers=self.headers, timeout=2)
            return reply.status_code == 200 and reply.json().get("model_path") == str(self.model)
        return False

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Terminate the process (killed after 10 s) and remove its prompt cache's folder."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self.cache_disk is not None:
            shutil.rmtree(self.cache_disk, ignore_errors=True)
            self.cache_disk = None

    def __enter__(self) -> LlamaServerProcess:
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"
