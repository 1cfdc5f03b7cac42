"""TuneDesk's training engine: config, hardware, models, data, train(), the runner."""

import logging
import warnings

# bitsandbytes looks for an optional fused CPU 4-bit kernel on the Hugging Face Hub, which
# TuneDesk never contacts; its built-in CPU path works, so the lookup failure is only noise.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def _not_int8_cast_notice(record: logging.LogRecord) -> bool:
    # 8-bit layers take fp16 inputs; bitsandbytes logs a warning on *every* matmul that gets
    # fp32/bf16 activations (thousands per step on CUDA). The cast is expected: drop only that.
    return not str(record.msg).startswith("MatMul8bitLt: inputs will be cast")


logging.getLogger("bitsandbytes.autograd._functions").addFilter(_not_int8_cast_notice)
# peft calls a transformers property that transformers 5 renamed; harmless until v6.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
