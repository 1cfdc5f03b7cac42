"""Whether a checkpoint's LoRA was trained with the settings of the run resuming it.

A resumed run takes its settings from its command line (docs/guide.md). A checkpoint of
another LoRA rank or other targets does not fit the model at all, but one of another alpha,
dropout, blocks or base model loads without an error and would go on training as another
adapter than the one it began; so every one of these settings is compared with the
checkpoint's ``adapter_config.json`` before its weights load, and a difference refuses the
resume in one sentence naming the setting, the checkpoint's value and this run's.
"""

from __future__ import annotations

import json
from pathlib import Path

# (adapter_config.json key, the setting in words, the flag or config field that sets it)
SETTINGS = (
    ("r", "LoRA rank", "--lora-r"),
    ("lora_alpha", "LoRA alpha", "--lora-alpha"),
    ("lora_dropout", "LoRA dropout", "--lora-dropout"),
    ("target_modules", "LoRA targets", "lora.target_modules, lora.include_mlp"),
    ("layers_to_transform", "LoRA blocks", "--lora-top-layers"),
    ("base_model_name_or_path", "base model", "--model"),
)


def _shown(key: str, value) -> str:
    if key == "target_modules":
        return value if isinstance(value, str) else ", ".join(sorted(value or []))
    if key == "layers_to_transform":
        return f"{min(value)}-{max(value)}" if value else "all"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _same(key: str, saved, live) -> bool:
    if key == "target_modules" and not isinstance(saved, str) and not isinstance(live, str):
        return set(saved or []) == set(live or [])
    if key == "layers_to_transform":
        return sorted(saved or []) == sorted(live or [])
    if isinstance(saved, (int, float)) and isinstance(live, (int, float)):
        return float(saved) == float(live)
    return saved == live


def differences(saved: dict, live: dict) -> list[tuple[str, str, str, str]]:
    """``(setting, checkpoint's value, this run's value, flag)`` for each LoRA setting of
    :data:`SETTINGS` in which two PEFT adapter configs (as dicts) differ."""
    return [
        (label, _shown(key, saved.get(key)), _shown(key, live.get(key)), flag)
        for key, label, flag in SETTINGS
        if not _same(key, saved.get(key), live.get(key))
    ]


def refusal(ckpt: Path, model) -> str | None:
    """The sentence refusing to resume from ``ckpt`` into ``model`` (a PEFT model), or None
    when the checkpoint's LoRA settings are this run's (or its config cannot be read: its
    weights then say whether they fit)."""
    try:
        saved = json.loads((ckpt / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return None
    found = differences(saved, model.peft_config["default"].to_dict())
    if not found:
        return None
    theirs = " and ".join(f"{label} {value}" for label, value, _, _ in found)
    ours = " and ".join(f"{label} {value}" for label, _, value, _ in found)
    flags = ", ".join(dict.fromkeys(flag for *_, flag in found))
    return (
        f"checkpoint {ckpt.name} in {ckpt.parent.parent} was trained with {theirs}; this run "
        f"has {ours}: resume with the settings the run began with ({flags}), or train anew "
        "without --resume"
    )
