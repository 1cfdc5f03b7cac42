"""Helpers for the serving tests: seeded adapters on a shelf, the API in a real HTTP server
(uvicorn in a thread) on a free port."""

from __future__ import annotations

import json

from bench.local_server import free_port, serving  # noqa: F401 (the tests' import point)

ADAPTERS = ("a", "b", "c")


def put_adapters(
    home, model_dir, names=ADAPTERS, targets=("q_proj", "v_proj", "o_proj"), first_seed: int = 1
) -> None:
    """Seeded random LoRA adapters (large enough to change answers) with manifests."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from core import models

    weight_hash = models.resolve(str(model_dir)).weight_hash
    for seed, name in enumerate(names, start=first_seed):
        torch.manual_seed(seed)
        config = LoraConfig(
            r=4, lora_alpha=8, target_modules=list(targets), init_lora_weights=False
        )
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.3)
        model.save_pretrained(home / "adapters" / name)
        manifest = {
            "format": "tunedesk-adapter/1",
            "name": name,
            "base_model": {"name": str(model_dir), "weight_hash": weight_hash},
        }
        (home / "adapters" / name / "manifest.json").write_text(json.dumps(manifest))


def api_app(engines, api_key=None, feedback=None):
    from fastapi import FastAPI

    from serve.openai_api import OpenAIServer

    app = FastAPI()
    app.include_router(OpenAIServer(engines, api_key, feedback).router())
    return app
