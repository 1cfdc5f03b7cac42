"""TuneDesk's training engine: config, hardware, models, data, train(), the runner."""

import logging
import os
import warnings

# Training shares 2 cores with the app's chat: with OpenMP's default active waiting, two busy
# torch processes starve each other's threads (decode fell from ~20 to ~2 tokens/s, see
# docs/benchmarks.md). Passive waiting must be set before torch loads; an explicit value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from finetune.malloc import return_freed_memory_to_os  # noqa: E402

return_freed_memory_to_os()  # activations freed after each step leave the process (malloc.py)

# bitsandbytes looks for an optional fused CPU 4-bit kernel on the Hugging Face Hub, which
# TuneDesk never contacts; its built-in CPU path works, so the lookup failure is only noise.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
# peft calls a transformers property that transformers 5 renamed; harmless until v6.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
