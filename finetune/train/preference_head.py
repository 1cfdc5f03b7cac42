"""A lean LM head for TRL's preference losses on the CPU.

TRL's DPO loss asks the policy for per-token log-probabilities (``model(..., labels=labels,
fused_lm_head=True)``, TRL's fused head). Off a GPU that head scores every position, padding and
prompt included, runs its vocabulary products in fp32 whatever the autocast, and computes the
logits again in the backward pass. Here the same call is answered by the model's backbone and
:func:`linear_log_probs`: only the answer tokens are scored, in the run's precision, and the
gradient with respect to the hidden states is made in the forward pass (one product more, none
in backward), as ``finetune.train.fused.linear_cross_entropy_sum`` does for supervised training.
The values match TRL's head (tests/finetune/train/test_preference_head.py); the speed is in
docs/benchmarks.md.

DPO's reference log-probabilities (the starting adapter's, which TRL keeps as a frozen LoRA
named ``ref``) never change, yet TRL computes them at every step through its own head.
:func:`precompute_reference` scores them once, before training, through the lean head, and hands
them to TRL as its own precomputed-reference columns.
"""

from __future__ import annotations

import torch

from finetune.train.fused import CE_CHUNK_ROWS, head_returns_hidden, lean_head
from finetune.train.lean_lora import frozen_cast


class _LinearLogProbs(torch.autograd.Function):
    """Per-row log-probability of ``targets`` under ``hidden @ weight.T``, with each row's
    entropy, mean logit and whether the target is the top token (those three without gradient).

    The gradient with respect to ``hidden`` (one-hot minus softmax, times the weight) is computed
    chunk by chunk in the forward pass and is all that is saved; ``weight`` must be frozen.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_rows: int):
        rows, need_grad = hidden.shape[0], hidden.requires_grad
        acc = torch.promote_types(hidden.dtype, torch.float32)  # softmax in fp32 at least
        logps, entropy, mean = (
            torch.empty(rows, dtype=acc, device=hidden.device) for _ in range(3)
        )
        top1 = torch.empty(rows, dtype=torch.bool, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_grad else None
        for start in range(0, rows, chunk_rows):
            part, t = slice(start, start + chunk_rows), targets[start : start + chunk_rows]
            logits = (hidden[part] @ weight.t()).to(acc)
            mean[part] = logits.mean(dim=-1)
            top1[part] = logits.argmax(dim=-1) == t
            logits -= torch.logsumexp(logits, dim=-1, keepdim=True)  # now log-softmax, in place
            logps[part] = logits.gather(1, t[:, None]).squeeze(1)
            probs = logits.exp()
            entropy[part] = -(probs * logits).sum(dim=-1)
            if need_grad:
                probs[torch.arange(len(t), device=t.device), t] -= 1.0
                grad_hidden[part] = (probs.to(weight.dtype) @ weight).neg_().to(hidden.dtype)
        ctx.save_for_backward(grad_hidden)
        ctx.mark_non_differentiable(entropy, mean, top1)
        return logps, entropy, mean, top1

    @staticmethod
    def backward(ctx, grad_logps, *_):
        (grad_hidden,) = ctx.saved_tensors
        return grad_hidden * grad_logps[:, None].to(grad_hidden.dtype), None, None, None


def linear_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_rows: int = CE_CHUNK_ROWS,
):
    """``(log_probs, entropy, mean_logits, is_top1)`` of each row of ``hidden @ weight.T``
    against ``targets``, without keeping the (rows x vocabulary) logits."""
    return _LinearLogProbs.apply(hidden, weight, targets, chunk_rows)


class LeanHeadPolicy:
    """The policy as TRL's preference losses call it, its fused-head calls answered by
    :func:`linear_log_probs` (the output has the fields TRL reads: ``log_probs``, ``entropy``,
    ``mean_logits``, ``is_top1``, ``label_mask``, ``loss``). Other calls and attributes go to the
    model. ``precision``: the run's (the head's products in bfloat16 for ``bf16``, else float32)."""

    def __init__(self, model, precision: str = "fp32"):
        self.model, self.dtype = model, torch.bfloat16 if precision == "bf16" else torch.float32

    def __call__(self, *args, labels=None, fused_lm_head=False, **kwargs):
        if not fused_lm_head:
            return self.model(*args, labels=labels, **kwargs)
        from trl.trainer.utils import FusedCausalLMOutput

        weight = lean_head(self.model)
        if weight is None:  # a head it cannot take over: TRL's own
            return self.model(*args, labels=labels, fused_lm_head=True, **kwargs)
        weight = frozen_cast(
            self.model.get_base_model().get_output_embeddings(), weight, self.dtype
        )
        with head_returns_hidden(self.model):
            hidden = self.model(*args, **kwargs).logits[:, :-1]
        targets = labels[:, 1:].to(hidden.device)
        mask = targets != -100
        logps, entropy, mean, top1 = linear_log_probs(
            hidden[mask].to(weight.dtype), weight, targets[mask]
        )
        # masked_scatter keeps the zeros at prompt and padding connected to the
        # graph, as TRL's head does
        log_probs, entropy, mean = (
            x.new_zeros(mask.shape).masked_scatter(mask, x) for x in (logps, entropy, mean)
        )
        is_top1 = top1.new_zeros(mask.shape).masked_scatter(mask, top1)
        return FusedCausalLMOutput(
            loss=-log_probs.sum() / mask.sum().clamp(min=1),
            log_probs=log_probs,
            entropy=entropy,
            mean_logits=mean,
            is_top1=is_top1,
            label_mask=mask,
        )

    def __getattr__(self, name):
        return getattr(self.model, name)


def with_lean_head(trainer_class, precision: str):
    """``trainer_class`` (TRL's ``DPOTrainer``) whose loss calls the policy through
    :class:`LeanHeadPolicy`."""

    class LeanHeadTrainer(trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return super().compute_loss(
                LeanHeadPolicy(model, precision), inputs, return_outputs, num_items_in_batch
            )

    return LeanHeadTrainer


def precompute_reference(trainer, precision: str, batch_size: int, stop=None) -> int:
    """Score every training pair under DPO's reference once, through the lean head, and give the
    sums to ``trainer`` (TRL's ``DPOTrainer``) as its precomputed reference: no step runs the
    reference again. The pairs go in order of length (less padding; the sums go back to their
    rows). ``stop()``, asked between batches, ends the pass early: TRL then scores the reference
    at each step, and the run stops after its first. Returns the pairs scored."""
    from torch.utils.data import DataLoader

    rows = trainer.train_dataset
    longest = [
        len(p) + max(len(c), len(r))
        for p, c, r in zip(
            rows["prompt_ids"], rows["chosen_ids"], rows["rejected_ids"], strict=True
        )
    ]
    order = sorted(range(len(rows)), key=longest.__getitem__)
    policy = LeanHeadPolicy(trainer.model, precision)
    loader = DataLoader(
        rows.select(order), batch_size=batch_size, collate_fn=trainer.data_collator, shuffle=False
    )
    chosen, rejected = torch.zeros(len(rows)), torch.zeros(len(rows))
    done = 0
    for batch in loader:
        if stop is not None and stop():
            return done
        batch = {
            k: v.to(trainer.accelerator.device) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
        }
        pair_chosen, pair_rejected = trainer.compute_ref_log_probs(policy, batch)
        at = torch.tensor(order[done : done + len(pair_chosen)])
        chosen[at], rejected[at] = pair_chosen.float().cpu(), pair_rejected.float().cpu()
        done += len(pair_chosen)
    trainer.train_dataset = rows.add_column("ref_chosen_logps", chosen.tolist()).add_column(
        "ref_rejected_logps", rejected.tolist()
    )
    trainer.precompute_ref_logps = True
    return done
