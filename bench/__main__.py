"""`python -m bench <command>`: every benchmark and diagnostic of TuneDesk, apart from the product.

Nothing in the product imports this package. Benchmarks print their tables; writing into
docs/benchmarks-log.md (the dated history) is an explicit flag (``--write-docs``).
"""

from __future__ import annotations

import sys

from core import cli

COMMANDS: cli.CommandTable = {
    "training": (
        "bench.training.command",
        "training throughput: the seeds' HF Trainer recipe vs TuneDesk's, over a grid",
    ),
    "serving": (
        "bench.serving",
        "adapter switch/load latency, decode speed, Compare, many clients through the API",
    ),
    "model-costs": (
        "bench.model_costs",
        "each recommended model's training and llama-server cost here, for the Train tab",
    ),
    "llama-repack": (
        "bench.llama_repack",
        "llama-server's decode speed with and without llama.cpp's weight repacking (AMX)",
    ),
    "train-beside-build": (
        "bench.train_beside_build",
        "a training run's steps alone, beside make run's llama.cpp build, and with it waiting",
    ),
    "answer-beside-build": (
        "bench.answer_beside_build",
        "Chat's PyTorch answers with make run's llama.cpp build stopped and beside them",
    ),
    "llama-threads": (
        "bench.llama_threads",
        "llama-server's decode speed on all cores and on one, alone and beside busy processes",
    ),
    "gateway": (
        "bench.gateway",
        "TuneDesk's /v1 beside llama.cpp's own llama-server: same GGUFs, same run",
    ),
    "turns": (
        "bench.turns",
        "first-token time along one support chat, with and without reused beginnings",
    ),
    "gpu-check": (
        "bench.gpucheck.command",
        "smoke-test every CUDA training path on one GPU (a few minutes)",
    ),
    "gpu-step": (
        "bench.gpu_step",
        "one LoRA training step on a GPU profiled: launches, busy share, MFU, torch.compile",
    ),
    "compile-step": (
        "bench.compile_step",
        "the product's training step with decoder layers eager and compiled, CPU or GPU",
    ),
    "eval-engines": (
        "bench.eval_engines",
        "one evaluation answered by PyTorch and by llama-server: time, ratio, verdicts",
    ),
    "gate-demo": ("bench.gate_demo", "a good and a damaged adapter through the release gate"),
    "shuffle-intents": (
        "bench.shuffle_intents",
        "a copy of a labelled dataset whose every answer answers another intent",
    ),
    "gate-false-alarm": (
        "bench.gate_false_alarm",
        "how often the gate flags a change that makes no difference",
    ),
    "budget-sweep": (
        "bench.budget_sweep",
        "the Train tab's time budget with one setting changed: which recipe it should train",
    ),
    "preference": (
        "bench.preference",
        "DPO / ORPO on Bitext pairs over a Train-tab SFT adapter: held-out accuracy",
    ),
    "knowledge-retrieval": (
        "bench.knowledge_retrieval",
        "BM25 on the knowledge shelf: how often held-out questions find their intent",
    ),
    "answer-check": ("bench.answer_check", "the answer check before sending, on held-out rows"),
    "passages-training": (
        "bench.passages_training",
        "right intent, grounded and not, of adapters trained with and without passages",
    ),
    "policy-change": (
        "bench.policy_change",
        "a changed refund article, labelled and not: do the answers say the new policy",
    ),
    "follow-ups": (
        "bench.followups",
        "two-turn conversations: the second message read alone and as grounding reads it",
    ),
    "grounded-serving": (
        "bench.grounded_serving",
        "first token and throughput of grounded answers beside plain ones, on llama-server",
    ),
    "screenshots": (
        "bench.screenshots",
        "the README's pictures: a short run in the Train tab and Compare, in Chromium",
    ),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if __name__ == "__main__" and argv[:1] == ["training"]:
        from finetune.train.allocator import reexec_with_tcmalloc

        reexec_with_tcmalloc("bench", argv)  # the same allocator as training itself
    return cli.run("python -m bench", __doc__.splitlines()[0], COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
