"""The Train tab's Check: the memory estimate, the model's cost note, and the dry run's text
(it loads no weights in this process). No gradio here."""

from __future__ import annotations


def estimate_text(cfg) -> str:
    """Memory estimate for the Train tab (reads the model config only; loads no weights)."""
    from core.models import resolve
    from finetune.train.dryrun import estimate_memory
    from finetune.train.model_cost import cost_text

    resolved = resolve(cfg.model.name)
    est = estimate_memory(cfg, resolved)
    fits = "fits" if est["fits"] else "**will not fit**"
    text = (
        f"Settings are valid. Estimated peak memory {est['total_gib']:.1f} GiB on {est['device']} "
        f"({est['device_gib']:.0f} GiB) — {fits}: weights {est['weights_gib']:.2f}, activations "
        f"{est['activations_gib']:.2f}, logits {est['logits_gib']:.2f}, LoRA+optimizer "
        f"{est['lora_and_optimizer_gib']:.2f} GiB; {est['lora_params']:,} trainable parameters."
    )
    if cfg.train.time_budget_s > 0 and cfg.train.method != "sft":
        text += (
            f" The {cfg.train.method.upper()} run trains {_steps_or_epochs(cfg.train)} or until "
            f"its time budget, {cfg.train.time_budget_s / 60:g} min from start to saved adapter, "
            "ends: whichever comes first."
        )
    elif cfg.train.time_budget_s > 0:
        from finetune.train.speed_record import budget_text

        text += (
            f" The run takes its time budget, {cfg.train.time_budget_s / 60:g} min from start to "
            "saved adapter: it times its first steps and sizes the rest to end on time.\n\n"
            + budget_text(cfg)
        )
    text += f"\n\n⚠️ {est['warning']}" if est["warning"] else ""
    # The picked model's measured speed and serving rate, when the table has it.
    cost = cost_text(cfg, name=resolved.name)
    return text + (f"\n\n{cost}" if cost else "")


def model_note(name: str | None) -> str:
    """What the picked model cost as measured, shown under the picker as soon as it is picked
    (nothing is downloaded; Check adds the steps the settings' time budget holds); "" for a model
    the table lacks."""
    from finetune.config import RunConfig
    from finetune.train.model_cost import cost_text

    cfg = RunConfig()  # no time budget: steps depend on settings Check reads
    cfg.model.name = name or ""
    return cost_text(cfg)


def _steps_or_epochs(t) -> str:
    return f"{t.max_steps} steps" if t.max_steps > 0 else f"{t.epochs:g} epochs"


def compile_sentence(c: dict | None) -> str:
    """What the dry run found of compiling the decoder layers ("" where the run does not)."""
    if not c:
        return ""
    if not c.get("compiled"):
        return (
            f"Compiling the decoder layers failed here ({c.get('compile_failed')}): the run "
            "trains eagerly. "
        )
    return (
        f"The run compiles its decoder layers: its first step takes {c.get('compile_s', 0):.0f} s "
        "more, and the step above ran compiled. "
    )


def dry_run_text(cfg) -> str:
    """Run one real training step (nothing is saved) and report its time and memory.

    It runs in a child process: its memory goes back when it ends, and its peak is its own,
    not the chat model's too.
    """
    from finetune.train.dryrun_process import dry_run_in_child

    r = dry_run_in_child(cfg)
    minutes = r.get("projected_seconds", 0) / 60
    text = (
        f"Dry run: one micro-batch of {r.get('tokens_per_micro_batch', 0):,} tokens took "
        f"{r.get('seconds_per_step', 0):.2f} s, peak memory {r.get('peak_memory_gib', 0):.2f} "
        "GiB. "
    )
    if r.get("batch_auto"):  # batch size "auto": what it resolved to here, and why
        text += r["batch_auto"][0].upper() + r["batch_auto"][1:] + ". "
    text += compile_sentence(r.get("compile"))
    if (
        cfg.train.time_budget_s > 0 and "budget" in r
    ):  # the steps left after start-up and validation
        b = r["budget"]
        return text + ("⚠️ " if b["verdict"] == "refuse" else "") + b["sentence"]
    return (
        text + f"The whole run ({r.get('total_steps')} steps) should take about {minutes:.1f} min."
    )
