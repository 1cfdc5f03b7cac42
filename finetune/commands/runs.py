"""`python -m finetune runs`: list the runs the Train tab supervises; `--stop ID` asks one to
stop."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("--stop", metavar="RUN_ID", help="ask this run to finish its step and save")


def main(args) -> int:
    from finetune.train import runner

    if args.stop:
        run = runner.get(args.stop)  # an unknown run: one sentence, exit 2
        if not (run.run_dir / "status.json").exists():
            raise ValueError(
                f"run {args.stop!r} was not started by the Train tab, so nothing supervises it; "
                "a `python -m finetune train` run stops with Ctrl-C in its terminal (it saves)"
            )
        status = runner.stop(args.stop)
        print(f"{args.stop}: {status.get('state', '?')} {status.get('reason', '')}".rstrip())
        return 0
    runs = runner.list_runs()
    if not runs:
        from core import paths

        print(
            f"No run started from the Train tab in {paths.subdir('runs')}; a "
            "`python -m finetune train` run reports in its own terminal."
        )
    for r in runs:
        s = r.status
        print(
            f"{r.run_id:28} {s.get('state', '?'):9} adapter={s.get('adapter', '-')} "
            f"{s.get('reason', '')}"
        )
    return 0
