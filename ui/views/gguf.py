"""The Adapters tab's GGUF export: choices offered and the result as Markdown. No gradio here."""

from __future__ import annotations

GGUF_TYPES = ["f16", "q8_0", "q4_k_m", "q5_k_m"]
DEFAULT_TYPES = ["q8_0"]


def gguf_markdown(result) -> str:
    """Where the export went and each file's size and sha256, as a Markdown table."""
    lines = [f"⚠️ Exported anyway: {result.gate_warning}.", ""] if result.gate_warning else []
    lines += [
        f"GGUF export written to `{result.folder}`.",
        "",
        "| file | size | sha256 |",
        "|---|---:|---|",
    ]
    lines += [f"| `{f.file}` | {_size(f.bytes)} | `{f.sha256}` |" for f in result.files]
    lines += [
        "",
        "Run it: `ollama create <name> -f Modelfile` in that folder "
        "(see its README.md for llama-cli and llama-server).",
    ]
    if result.template_note:
        lines.append(f"\nThe Modelfile has no TEMPLATE: {result.template_note}.")
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"
