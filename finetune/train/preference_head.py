"""A lean LM head for TRL's preference losses on the CPU.

TRL's DPO loss asks the policy for per-token log-probabilities (``model(..., labels=labels,
fused_lm_head=True)``, TRL's fused head). Off a GPU that head scores every position, padding and
prompt included, runs its vocabulary products in fp32 whatever the autocast, and computes the
logits again in the backward pass. Here the same call is answered by the model's backbone and
:func:`linear_log_probs`: only the answer tokens are scored, in the run's precision, and the
gradient with respect to the hidden states is made in the forward pass (one product more, none
in backward), as ``finetune.train.fused.linear_cross_entropy_sum`` does for supervised training.
The values match TRL's head (tests/finetune/test_preference_head.py); the speed is in
docs/benchmarks.md.
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
        logps, entropy, mean = (torch.empty(rows, dtype=acc, device=hidden.device) for _ in range(3))
        top1 = torch.empty(rows, dtype=torch.bool, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_grad else None
        for start in range(0, rows, chunk_rows):
            part, t = slice(start, start + chunk_rows), targets[start:start + chunk_rows]
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


def linear_log_probs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                     chunk_rows: int = CE_CHUNK_ROWS):
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
        weight = frozen_cast(self.model.get_base_model().get_output_embeddings(), weight, self.dtype)
        with head_returns_hidden(self.model):
            hidden = self.model(*args, **kwargs).logits[:, :-1]
        targets = labels[:, 1:].to(hidden.device)
        mask = targets != -100
        logps, entropy, mean, top1 = linear_log_probs(hidden[mask].to(weight.dtype), weight, targets[mask])
        # masked_scatter keeps the zeros at prompt and padding connected to the graph, as TRL's head does
        log_probs, entropy, mean = (x.new_zeros(mask.shape).masked_scatter(mask, x) for x in (logps, entropy, mean))
        is_top1 = top1.new_zeros(mask.shape).masked_scatter(mask, top1)
        return FusedCausalLMOutput(loss=-log_probs.sum() / mask.sum().clamp(min=1), log_probs=log_probs,
                                   entropy=entropy, mean_logits=mean, is_top1=is_top1, label_mask=mask)

    def __getattr__(self, name):
        return getattr(self.model, name)


def with_lean_head(trainer_class, precision: str):
    """``trainer_class`` (TRL's ``DPOTrainer``) whose loss calls the policy through
    :class:`LeanHeadPolicy`."""

    class LeanHeadTrainer(trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return super().compute_loss(LeanHeadPolicy(model, precision), inputs, return_outputs, num_items_in_batch)

    return LeanHeadTrainer
