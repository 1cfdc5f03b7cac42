"""The README written beside a GGUF export: how to run it in Ollama, llama-cli, llama-server."""

from __future__ import annotations


def readme(name: str, ggufs: list[str], modelfiles: list[str], template_note: str = "") -> str:
    """Markdown naming the files and the commands that run them."""
    merged = [g for g in ggufs if not g.startswith("base-") and "-lora-" not in g]
    base = next((g for g in ggufs if g.startswith("base-")), None)
    lora = next((g for g in ggufs if "-lora-" in g), None)
    lines = [
        f"# {name} (GGUF)",
        "",
        "Exported by TuneDesk with llama.cpp's own converter and quantizer.",
        "Sizes and sha256 of every file: `manifest.json`.",
        "",
        "## Files",
        "",
    ]
    lines += [f"- `{g}`" for g in ggufs] + [f"- `{m}` (Ollama)" for m in modelfiles]
    lines += ["", "## Ollama", "", "```"]
    for m in modelfiles:
        suffix = "-lora" if m.endswith(".lora") else ""
        lines.append(f"ollama create {name.lower()}{suffix} -f {m}")
    lines += [f"ollama run {name.lower()}", "```", ""]
    if any(m.endswith(".lora") for m in modelfiles):
        lines += [
            "`Modelfile.lora` (base + LoRA) needs an Ollama older than 0.34.1: later versions "
            "refuse `ADAPTER` (ollama/ollama#14969). Export a merged type (f16, q8_0 ...) for "
            "`Modelfile`.",
            "",
        ]
    if template_note:
        lines += [
            f"The Modelfile has no TEMPLATE: {template_note}. Ollama then uses its own guess.",
            "",
        ]
    model = merged[0] if merged else base
    adapter = f" --lora {lora}" if lora and not merged else ""
    lines += [
        "## llama.cpp",
        "",
        "The chat template and the end-of-turn token are inside the files:",
        "",
        "```",
        f"llama-cli -m {model}{adapter} -cnv",
        f"llama-server -m {model}{adapter} --port 8080",
        "```",
    ]
    if merged and lora:
        lines += [
            "",
            "Base model plus LoRA, unmerged:",
            "",
            "```",
            f"llama-cli -m {base} --lora {lora} -cnv",
            "```",
        ]
    return "\n".join(lines) + "\n"
