"""Exports off the shelf: Hugging Face (import, merged folder, zip) and GGUF for llama.cpp/Ollama.

``adapters.export.hf`` holds import/merged/zip export; ``adapters.export.gguf`` the GGUF
export through llama.cpp's own converters. The names below are the ones callers used when
this was one module; they stay importable from here.
"""

from adapters.export.gguf_cache import ensure_base_gguf, ensure_lora_gguf
from adapters.export.hf import (
    ZipLimits,
    export_merged,
    export_zip,
    import_adapter,
    safe_extract,
    sanitize_name,
)

__all__ = [
    "ZipLimits",
    "ensure_base_gguf",
    "ensure_lora_gguf",
    "export_merged",
    "export_zip",
    "import_adapter",
    "safe_extract",
    "sanitize_name",
]
