"""llama.cpp's own tools, built by ``make llama`` from one pinned source archive: where the
converters and the ``llama-server`` / ``llama-quantize`` executables are, and one
``llama-server`` child process (serving uses it; GGUF export checks its files with it)."""
