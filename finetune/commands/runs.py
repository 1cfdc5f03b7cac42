"""`python -m finetune runs`: list supervised runs; `--stop ID` asks one to stop."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("--stop", metavar="RUN_ID", help="ask this run to finish its step and save")


def main(args) -> int:
    from finetune.train import runner

    if args.stop:
        print(runner.stop(args.stop))
        return 0
    for r in runner.list_runs():
        s = r.status
        print(
            f"{r.run_id:28} {s.get('state', '?'):9} adapter={s.get('adapter', '-')} "
            f"{s.get('reason', '')}"
        )
    return 0
