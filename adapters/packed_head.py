"""The output layer on a CPU in float32, through oneDNN's prepacked matmul.

The LM head is the largest single matrix of a small model (SmolLM2-135M: 49,152 x 576, tied to
the embeddings) and runs once per decode step for every row. PyTorch's plain ``F.linear`` on
it measured 9.6 ms for one row and 24.9 ms for 16 on 2 AMD EPYC cores without AVX512; oneDNN's
prepacked weights (``torch.ops.mkldnn._reorder_linear_weight`` + ``_linear_pointwise``, the
kernels ``torch.compile`` freezes CPU linears into) took 5.3 and 10.6 ms. Its rows are also
batch-invariant (a row's logits are bit-identical whether it is decoded alone or beside 15
others; the plain matmul's differ in the last bits), which keeps batched greedy answers equal
to solo ones. The packed copy costs one more copy of the head's weights in memory (113 MB for
the default model).

Only the head is packed: LoRA layers wrap the projections and the merged route rewrites their
weights in place, so a packed copy of those would go stale. Nothing here ever changes an answer
beyond float rounding: the swap is checked against ``F.linear`` before it is made, and any
failure leaves the plain layer in place.
"""

from __future__ import annotations

import os

PACK_ROWS_HINT = 16  # the batch size oneDNN packs for; measured no slower from 1 to 2,048 rows
ENV = "TUNEDESK_OUTPUT_LAYER"  # "plain" keeps PyTorch's own linear: an escape hatch, and the
#                                 baseline of ``python -m adapters.bench --clients ... --heads``


def pack_output_layer(model) -> str:
    """Route ``model``'s output layer through oneDNN's prepacked matmul when it can.

    Returns:
        One line saying what was done, or why not (for the status line and the logs).
    """
    import torch

    if os.environ.get(ENV, "").strip().lower() == "plain":
        return f"output layer left as is: {ENV}=plain"
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear or "forward" in vars(head):  # a quantized or wrapped head
        return "output layer left as is: not a plain linear layer"
    weight = head.weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return f"output layer left as is: {weight.dtype} on {weight.device.type} (packed only for CPU float32)"
    if not torch.backends.mkldnn.is_available():
        return "output layer left as is: this PyTorch has no oneDNN"
    try:
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
            bias = None if head.bias is None else head.bias.detach()
            probe = torch.randn(3, weight.shape[1])
            got = torch.ops.mkldnn._linear_pointwise(probe, packed, bias, "none", [], "")
            want = torch.nn.functional.linear(probe, weight, bias)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                return "output layer left as is: the packed matmul disagreed with the plain one"
    except (RuntimeError, AttributeError) as err:  # an op missing from this build, a CPU it refuses
        return f"output layer left as is: {type(err).__name__}: {str(err)[:120]}"

    def forward(hidden):
        return torch.ops.mkldnn._linear_pointwise(hidden, packed, bias, "none", [], "")

    head.forward = forward  # this instance only; its weight (shared with the embeddings) is untouched
    return "output layer: oneDNN prepacked float32 matmul"
