"""The CPU's lean LM head for TRL's preference losses: the same log-probabilities, metrics and
gradients as TRL's own fused head, on real runs of a tiny model."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from shelf_helpers import put_adapter

import finetune.train.preference_head as preference_head
from finetune.train.preference import PreferenceConfig, train_preference
from finetune.train.preference_head import linear_log_probs


def test_linear_log_probs_match_the_full_softmax_and_its_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64)
    targets = torch.randint(0, 50, (37,))
    targets[0] = (hidden[0].detach() @ weight.t()).argmax()  # one row whose target is the top token
    logps, entropy, mean, top1 = linear_log_probs(hidden, weight, targets, chunk_rows=8)
    upstream = torch.randn(37, dtype=torch.float64)
    (logps * upstream).sum().backward()
    lean_grad, hidden.grad = hidden.grad.clone(), None

    logits = hidden @ weight.t()
    full = torch.log_softmax(logits, dim=-1)
    expected = full.gather(1, targets[:, None]).squeeze(1)
    (expected * upstream).sum().backward()
    assert torch.allclose(logps, expected) and torch.allclose(lean_grad, hidden.grad)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1)) and torch.allclose(
        mean, logits.mean(-1)
    )
    assert top1.tolist() == (logits.argmax(-1) == targets).tolist() and top1[0]


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [
        {
            "prompt": [{"role": "user", "content": f"question {i}: where is my order?"}],
            "chosen": "It ships today." + " More detail." * (i % 3),
            "rejected": "No idea.",
        }
        for i in range(8)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("method", ["cpo", "dpo"])
def test_the_lean_head_trains_as_trls_own_head_does(
    home, tiny_llama_dir, pairs_file, monkeypatch, method
):
    put_adapter(tiny_llama_dir, "support", targets=("q_proj", "v_proj"))
    calls = []
    original = preference_head.linear_log_probs
    monkeypatch.setattr(
        preference_head, "linear_log_probs", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    runs = {}
    for lean in (True, False):
        logs = []
        result = train_preference(
            PreferenceConfig(
                "support",
                str(pairs_file),
                name=f"{method}-{lean}",
                method=method,
                max_steps=3,
                batch_size=4,
                learning_rate=1e-2,
                lean_head=lean,
            ),
            on_log=lambda step, total, values, logs=logs: "loss" in values and logs.append(values),
        )
        runs[lean] = logs, load_file(result.path / "adapter_model.safetensors")
        if lean:  # the lean head answered every step's forward; DPO's reference: 8 pairs in
            # batches of 4 scored once before the first step, not again at each step
            assert len(calls) == 3 + (2 if method == "dpo" else 0)
            calls.clear()
    assert not calls  # lean_head=False: TRL's own head
    (lean_logs, lean_weights), (trl_logs, trl_weights) = runs[True], runs[False]
    assert len(lean_logs) == 3
    for key in (
        "loss",
        "logps/chosen",
        "logps/rejected",
        "rewards/margins",
        "entropy",
        "logits/chosen",
        "mean_token_accuracy",
    ):
        for lean_step, trl_step in zip(lean_logs, trl_logs, strict=True):
            assert lean_step[key] == pytest.approx(trl_step[key], rel=1e-4, abs=1e-5), key
    assert lean_weights.keys() == trl_weights.keys()
    for name, tensor in lean_weights.items():
        assert torch.allclose(tensor, trl_weights[name], atol=1e-5), name
    moved = load_file(home / "adapters" / "support" / "adapter_model.safetensors")
    assert any(
        not torch.equal(moved[n], lean_weights[n]) for n in moved
    )  # three steps changed the adapter
