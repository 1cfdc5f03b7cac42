"""The batch cap and the prefix cache's budget come from the memory free where the model lives."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from core.limits import KvBudget, available_bytes, device_free_bytes, kv_bytes_per_token

CONFIG = LlamaConfig(
    hidden_size=576,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
)


def test_kv_budget_admits_rows_while_their_reservations_fit():
    assert kv_bytes_per_token(CONFIG, 4) == 2 * 30 * 3 * 64 * 4  # 46 KB a token in fp32
    budget = KvBudget(CONFIG, 4, free_bytes=2 * 46080 * 8192 * 3)  # three full contexts in half
    assert budget.max_batch == 3 and budget.fits(1, 10**6)  # one row always may
    assert budget.fits(3, 8192) and not budget.fits(4, 100) and not budget.fits(2, 8193 * 2)


def test_free_memory_is_the_hosts_on_a_cpu():
    assert device_free_bytes("cpu") > 0
    assert abs(device_free_bytes("cpu") - available_bytes()) < 2**30


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: torch sees none here")
def test_free_memory_is_the_gpus_own_on_cuda():
    free, total = torch.cuda.mem_get_info()
    assert 0 < device_free_bytes("cuda") <= total and abs(device_free_bytes("cuda") - free) < 2**30


def test_the_scheduler_sizes_its_prefix_cache_at_the_first_request(home, varied_dir):
    from inference.generate import GenerationSettings
    from inference.session import ModelSession
    from serve.batching.prefix_cache import MEMORY_SHARE
    from serve.batching.scheduler import Scheduler

    session = ModelSession(str(varied_dir), dtype="float32")
    with Scheduler(session) as scheduler:
        assert scheduler.prefix.max_bytes == 0
        scheduler.submit(
            [{"role": "user", "content": "hi"}], None, GenerationSettings(max_new_tokens=2)
        ).text()
        share = scheduler.prefix.max_bytes / available_bytes()
    assert 0.5 * MEMORY_SHARE < share < 2 * MEMORY_SHARE
