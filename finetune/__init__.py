"""TuneDesk's training engine: config, hardware, models, data, train(), the runner."""

import logging
import warnings

# bitsandbytes looks for an optional fused CPU 4-bit kernel on the Hugging Face Hub, which
# TuneDesk never contacts; its built-in CPU path works, so the lookup failure is only noise.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
# peft calls a transformers property that transformers 5 renamed; harmless until v6.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
