"""Short-row attention computes what sdpa computes, in bf16 as closely, and hands
the rest to sdpa."""

from __future__ import annotations

import pytest
import torch

from finetune.train import cpu_attention
from finetune.train.cpu_attention import use_short_row_attention


def _two_models(tiny_llama_dir):
    """The tiny llama (4 heads, 2 key/value heads) twice, the second on short-row attention."""
    from transformers import AutoModelForCausalLM

    models = [
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir, attn_implementation="sdpa").train()
        for _ in range(2)
    ]
    assert use_short_row_attention(models[1])
    assert models[1].config._attn_implementation == cpu_attention.NAME
    return models


def _padded_batch(vocab: int, lengths: list[int]):
    torch.manual_seed(1)
    width = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), width))
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loss_and_grads(model, batch, bf16: bool):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(**batch).loss
    loss.backward()
    return loss.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _error(grads, reference) -> float:
    """The largest relative error of any parameter's gradient against the fp32 reference."""
    return max(
        float((grads[n] - g).norm() / g.norm()) for n, g in reference.items() if g.norm() > 0
    )


@pytest.mark.parametrize(
    "lengths", [[24, 24, 24], [24, 17, 9]], ids=["no padding", "right padding"]
)
def test_short_rows_in_bf16_are_as_close_to_fp32_as_sdpa(tiny_llama_dir, lengths):
    sdpa, short = _two_models(tiny_llama_dir)
    batch = _padded_batch(sdpa.config.vocab_size, lengths)
    ref_loss, ref = _loss_and_grads(sdpa, batch, bf16=False)
    sdpa_loss, sdpa_grads = _loss_and_grads(sdpa, batch, bf16=True)
    short_loss, short_grads = _loss_and_grads(short, batch, bf16=True)

    assert abs(short_loss - ref_loss) <= max(2 * abs(sdpa_loss - ref_loss), 1e-2)
    sdpa_error, short_error = _error(sdpa_grads, ref), _error(short_grads, ref)
    assert short_error < 0.05
    assert short_error <= 2 * sdpa_error + 1e-3
    # In fp32 the call goes to sdpa itself: the same numbers to the bit.
    fp32_loss, fp32_grads = _loss_and_grads(short, batch, bf16=False)
    assert torch.equal(fp32_loss, ref_loss)
    assert all(torch.equal(fp32_grads[n], g) for n, g in ref.items())


def test_padding_is_masked_in_short_rows(tiny_llama_dir):
    """A padded row scores its real tokens as the same row alone does."""
    _, short = _two_models(tiny_llama_dir)
    short.eval()
    batch = _padded_batch(short.config.vocab_size, [24, 11])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        both = short(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        alone = short(input_ids=batch["input_ids"][1:, :11]).logits
    assert torch.allclose(both[1, :11].float(), alone[0].float(), atol=0.05)
    assert not torch.allclose(both[0, :11].float(), alone[0].float(), atol=0.05)


def test_long_rows_go_to_sdpa(tiny_llama_dir, monkeypatch):
    sdpa, short = _two_models(tiny_llama_dir)
    batch = _padded_batch(sdpa.config.vocab_size, [24, 17])
    monkeypatch.setattr(cpu_attention, "SHORT_ROW_TOKENS", 16)  # these rows now count as long
    sdpa_loss, sdpa_grads = _loss_and_grads(sdpa, batch, bf16=True)
    short_loss, short_grads = _loss_and_grads(short, batch, bf16=True)
    assert torch.equal(short_loss, sdpa_loss)
    assert all(torch.equal(short_grads[n], g) for n, g in sdpa_grads.items())


def test_only_plain_attention_models_on_the_cpu_switch(tiny_gpt2_dir, tiny_llama_dir):
    from transformers import AutoModelForCausalLM

    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_gpt2_dir, attn_implementation="sdpa")
    assert not use_short_row_attention(gpt2)  # not a llama-style attention
    eager = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, attn_implementation="eager")
    assert not use_short_row_attention(eager)  # someone chose eager: left as it is
    assert eager.config._attn_implementation == "eager"


def test_packed_short_rows_keep_their_examples_apart(tiny_llama_dir):
    """Two examples laid end to end in one row score as each does alone (sdpa's block mask)."""
    from finetune.data.collate import PACKING_ATTENTION, prepare_model_for_packing

    assert cpu_attention.NAME in PACKING_ATTENTION
    _, short = _two_models(tiny_llama_dir)
    prepare_model_for_packing(short)
    short.eval()
    torch.manual_seed(2)
    first, second = torch.randint(3, short.config.vocab_size, (2, 12))
    packed = torch.cat([first, second])[None]
    positions = torch.cat([torch.arange(12), torch.arange(12)])[None]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        together = short(input_ids=packed, position_ids=positions).logits[0]
        alone = short(input_ids=second[None]).logits[0]
    assert torch.allclose(together[12:].float(), alone.float(), atol=0.05)
    with (
        torch.no_grad(),
        torch.autocast("cpu", dtype=torch.bfloat16),
    ):  # one long example: not the same
        joined = short(input_ids=packed).logits[0]
    assert not torch.allclose(joined[12:].float(), alone.float(), atol=0.05)
