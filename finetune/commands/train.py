"""`python -m finetune train`: one run (under torchrun when it asks for several processes), a
dry run, or preference tuning, with a progress bar; the flags are
:mod:`finetune.commands.train_flags`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from core.optional_imports import keep_bitsandbytes_out, started_as
from finetune.commands.train_flags import add_arguments, build_config
from finetune.config import METHODS, PREFERENCE_METHODS

__all__ = ["add_arguments", "main", "torchrun_args"]  # the dispatcher calls the first two


def torchrun_args(run) -> list[str]:
    """torchrun's flags for ``RunArgs``: one machine standalone, or static rendezvous at node 0.

    Static rendezvous (``--node-rank`` plus node 0's address) keeps each machine's rank the
    one it was given, so node 0, which hosts the rendezvous, is also rank 0 and saves.
    """
    if run.nnodes == 1:
        return ["--standalone", f"--nproc-per-node={run.nproc_per_node}"]
    host, _, port = run.rdzv_endpoint.strip().rpartition(":")
    return [
        f"--nnodes={run.nnodes}",
        f"--node-rank={run.node_rank}",
        f"--master-addr={host}",
        f"--master-port={port}",
        f"--nproc-per-node={run.nproc_per_node}",
    ]


def _relaunch_under_torchrun(run) -> int:
    import subprocess

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_args(run),
        "-m",
        "finetune",
        *sys.argv[1:],
    ]
    # The supervising runner stops a run with a stop file plus SIGTERM to this process, and
    # Ctrl-C reaches the workers directly: they stop and save. Dying here instead would
    # report the run as killed while the workers are still writing the adapter.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    return subprocess.call(cmd)


def _print_problems(err) -> int:
    print("error: the training settings cannot run here:", file=sys.stderr)
    for problem in err.problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _input_problems(cfg) -> list[str]:
    """The settings' problems and the data file's (unreadable, columns it cannot tell apart, no
    usable row; a preference run's pairs), as the Train tab's Check finds them
    (:mod:`finetune.train.preflight`): checked before the base model resolves and the rows are
    tokenized, which print their progress first. Under torchrun the launching process has
    checked them already."""
    from finetune.config import PREFERENCE_METHODS, validate
    from finetune.train.preflight import dataset_problems, pairs_problems

    problems = validate(cfg)  # the machine's own checks come when the run starts
    path = cfg.data.path
    if isinstance(path, str) and path.strip():
        preference = cfg.train.method in PREFERENCE_METHODS
        problems += pairs_problems(path) if preference else dataset_problems(cfg.data)
    return problems


def _dry_run(cfg) -> int:
    from finetune.train import ConfigError
    from finetune.train.dryrun import dry_run
    from finetune.train.model_cost import cost_text

    try:
        report = dry_run(
            cfg, started=process_start()
        )  # a budget's start-up counts from here, as a run's
    except ConfigError as err:
        return _print_problems(err)
    if report["estimate"]["warning"]:
        print(f"warning: {report['estimate']['warning']}", file=sys.stderr)
    if report.get("batch_auto"):
        print(report["batch_auto"], file=sys.stderr)
    if c := report.get("compile"):
        said = (
            f"the first step took {c['compile_s']:.1f} s more, compiling the decoder layers"
            if c.get("compiled")
            else f"compiling the decoder layers failed ({c.get('compile_failed')}): trains eagerly"
        )
        print(f"compiled layers: {said}", file=sys.stderr)
    if (
        "budget" in report
    ):  # what the time budget buys; "warning:" when too few steps for a useful run
        b = report["budget"]
        print(
            f"{'warning' if b['verdict'] == 'refuse' else 'time budget'}: {b['sentence']}",
            file=sys.stderr,
        )
    if cost := cost_text(cfg):  # the measured table's figures for a recommended model
        print(f"model cost: {cost.replace('**', '')}", file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


def _budget_refusal(cfg) -> int | None:
    """Exit code 2 with the reason when the speeds last measured for these settings say the time
    budget buys too few steps for a useful run (``finetune.train.speed_record``); None otherwise."""
    from finetune.train.speed_record import budget_problems

    if problems := budget_problems(cfg):
        return _print_problems(SimpleNamespace(problems=problems))
    return None


def process_start() -> float | None:
    """When this process started (``time.time()``; Linux's /proc), or None where unknown."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return started if 0 <= time.time() - started < 86400 else None  # a clock set since: ignore it


def _print_warning(event: dict) -> None:
    """Warnings reach the terminal or train.log even with --quiet."""
    if event.get("type") == "warning":
        print(f"warning: {event['message']}", file=sys.stderr, flush=True)


def _preference(args, cfg, on_event, stop) -> int:
    """``--method dpo|cpo|orpo``: TRL's trainer on the pairs in ``--data``
    (finetune/train/preference.py), with the same progress events, stop and run folder as
    supervised training."""
    from finetune.train.preference import PreferenceConfig, train_preference
    from finetune.train.setup import check_config

    t = cfg.train
    if t.method not in PREFERENCE_METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {t.method!r}")
    if not t.from_adapter:
        raise ValueError(
            f"--method {t.method} trains an adapter further: name it with --from-adapter"
        )
    if not cfg.data.path:
        raise ValueError(
            "--data must name the pairs file (JSON lines with prompt, chosen, rejected)"
        )
    check_config(cfg)  # every other problem a supervised run is refused for (ConfigError: exit 2)
    # SFT's learning rate, epochs and batch size are not what each preference method measured best
    # (DPO and CPO: 1e-3, 1.5 epochs, 4 pairs a step): only what the user set counts (a config file
    # sets all; the Train tab shows the method's).
    mine = {
        f: getattr(t, f)
        for f in ("learning_rate", "epochs", "batch_size")
        if (args.config or getattr(args, f"train__{f}") is not None) and getattr(t, f) != "auto"
    }
    pref = PreferenceConfig(
        t.from_adapter,
        cfg.data.path,
        name=cfg.run.adapter_name or "",
        method=t.method,
        beta=t.beta,
        max_steps=t.max_steps or -1,
        grad_accum=t.grad_accum,
        max_length=cfg.data.max_length,
        max_pairs=cfg.data.max_samples or 0,
        seed=t.seed,
        gradient_checkpointing=t.gradient_checkpointing,
        device=t.device,
        precision=t.precision,
        sft_weight=args.sft_weight,
        time_budget_s=t.time_budget_s,
        **mine,
    )
    # A time budget counts from this process's start, as supervised training's does.
    result = train_preference(
        pref, on_event=on_event, stop=stop, run_dir=cfg.run.run_dir or None, started=process_start()
    )
    print(
        json.dumps(
            {
                "status": result.status,
                "adapter": str(result.path),
                "method": t.method,
                "from": t.from_adapter,
                "pairs": result.pairs,
                "steps": result.steps,
                "seconds": round(result.seconds, 1),
                "final_loss": result.final_loss,
            },
            indent=2,
        )
    )
    return 0


def main(args) -> int:
    from core.llama_cpp.build_pause import claim_cores

    # A llama.cpp build `make run` started waits while this process trains (or measures, in a
    # dry run): on two cores the run would lose steps to it (core/llama_cpp/build_pause.py).
    with claim_cores():
        return _main(args)


def _check_copy_target(out: Path) -> None:
    """Refuse an --output-dir on the shelf: the adapter is saved there already, and a copy
    would land on itself or inside another adapter's folder."""
    from core import paths

    shelf = (paths.home(create=False) / "adapters").resolve()
    where = out.expanduser().resolve()
    if where == shelf or shelf in where.parents:
        raise ValueError(
            f"--output-dir {out} is the adapter shelf or in it, where the adapter is saved "
            "anyway; name a folder outside it to copy into"
        )


def _build_waits_note() -> str | None:
    """A sentence for the run's log when a background llama.cpp build waits for it, else None."""
    from core.llama_cpp.binaries import build_progress, building

    if not building():
        return None
    return (
        f"llama.cpp's background build ({build_progress()} done) waits while this run trains; "
        "it goes on when the run ends"
    )


def _main(args) -> int:
    stop = threading.Event()
    # SIGTERM/SIGINT: finish the current step, save the adapter, exit cleanly. Set first: the
    # Train tab's Stop may come while this process is still importing or checking its input.
    # A dry run saves nothing: Ctrl-C ends it at once, as before.
    for sig in () if args.dry_run else (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.output_dir and Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
        raise ValueError(f"--output-dir {args.output_dir} is a file; name a folder to copy into")
    if args.output_dir:
        _check_copy_target(Path(args.output_dir))
    cfg = build_config(args)
    if cfg.train.method == "sft" and cfg.train.from_adapter:
        raise ValueError(
            "sft trains a new adapter on the base model; --from-adapter is for --method dpo, "
            "cpo or orpo"
        )
    if "WORLD_SIZE" not in os.environ and (problems := _input_problems(cfg)):
        return _print_problems(SimpleNamespace(problems=problems))  # before any progress line
    if (
        started_as("finetune")
        and cfg.train.quantization == "none"
        and cfg.train.optimizer == "adamw"
    ):
        keep_bitsandbytes_out()  # this process quantizes nothing: 1.3-1.5 s less at its start
    if args.dry_run and cfg.train.method != "sft":
        raise ValueError(
            "--dry-run measures supervised training; it does not cover dpo or orpo yet"
        )
    if args.dry_run:
        return _dry_run(cfg)
    if (refused := _budget_refusal(cfg)) is not None:
        return refused
    if (cfg.run.nproc_per_node > 1 or cfg.run.nnodes > 1) and "WORLD_SIZE" not in os.environ:
        from finetune.launch import launch_problems

        if problems := launch_problems(cfg.run, cfg.train):  # before torchrun waits for peers
            return _print_problems(SimpleNamespace(problems=problems))
        return _relaunch_under_torchrun(cfg.run)
    from core.console import ConsoleProgress
    from core.events import EventLog
    from finetune.train import ConfigError, train

    sinks = [EventLog(Path(args.events))] if args.events else []
    sinks.append(_print_warning)
    if not args.quiet and int(os.environ.get("RANK", "0")) == 0:
        sinks.append(ConsoleProgress())
    stop_file = Path(cfg.run.run_dir) / "stop" if cfg.run.run_dir else None
    if int(os.environ.get("RANK", "0")) == 0 and (note := _build_waits_note()):
        print(note, file=sys.stderr, flush=True)
        for sink in sinks:
            sink({"type": "status", "time": time.time(), "message": note})

    def stop_requested() -> bool:
        return stop.is_set() or bool(stop_file and stop_file.exists())

    if stop_requested():  # stopped before the model loads: nothing to load, nothing to save
        from finetune.train.run_state import NOTHING_SAVED

        for sink in sinks:
            sink(
                {
                    "type": "done",
                    "time": time.time(),
                    "status": "stopped",
                    "step": 0,
                    "adapter": None,
                    "note": NOTHING_SAVED,
                }
            )
            getattr(sink, "close", lambda: None)()
        print(NOTHING_SAVED)
        return 0
    try:
        if cfg.train.method != "sft":
            return _preference(args, cfg, lambda e: [s(e) for s in sinks], stop_requested)
        # A time budget counts from this process's start: imports and loading are part of the run.
        result = train(
            cfg,
            on_event=lambda e: [s(e) for s in sinks],
            stop=stop_requested,
            started=process_start(),
        )
    except ConfigError as err:
        return _print_problems(err)
    finally:
        for s in sinks:
            getattr(s, "close", lambda: None)()
    if result.adapter_dir is None:
        if result.note:
            print(result.note)
        return 0
    if args.output_dir:
        dest = Path(args.output_dir) / result.adapter_dir.name
        shutil.copytree(result.adapter_dir, dest, dirs_exist_ok=True)
        print(f"copied adapter to {dest}")
    print(
        json.dumps(
            {
                "status": result.status,
                "adapter": str(result.adapter_dir),
                "steps": result.steps,
                "metrics": result.metrics,
                **({"note": result.note} if result.note else {}),
            },
            indent=2,
        )
    )
    if (
        result.note
    ):  # the last line says it: a budget run that bought too few steps is no quiet "done"
        print(f"{result.status}, but {result.note}")
    return 0
