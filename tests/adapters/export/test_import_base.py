"""An imported adapter names its base the way a trained one does: a path to the app's own model
cache becomes the model's id with its weight hash, so every engine accepts it on that base."""

from __future__ import annotations

import json
import shutil

from adapters.export import import_adapter
from core import models


def _adapter_naming(random_lora_dir, tmp_path, base: str):
    folder = tmp_path / "plain-peft"
    shutil.copytree(random_lora_dir, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(
        json.dumps({**config, "base_model_name_or_path": base})
    )
    return folder


def test_a_path_into_the_model_cache_becomes_the_models_id_and_weights(
    home, tiny_llama_dir, random_lora_dir, tmp_path
):
    from inference.session import ModelSession

    cached = models.cache_dir_for("acme/tiny-support")
    shutil.copytree(tiny_llama_dir, cached)
    entry = import_adapter(_adapter_naming(random_lora_dir, tmp_path, str(cached)), name="sup-b")
    base = json.loads((entry.path / "manifest.json").read_text())["base_model"]
    resolved = models.resolve("acme/tiny-support", allow_hub=False)
    assert base["name"] == "acme/tiny-support" and base["weight_hash"] == resolved.weight_hash
    session = ModelSession("acme/tiny-support", dtype="float32")
    assert session.check_usable("sup-b")["base_model"]["weight_hash"] == resolved.weight_hash


def test_a_base_this_machine_lacks_stays_as_named_and_is_refused_by_name(
    home, random_lora_dir, tmp_path, tiny_llama_dir
):
    import pytest

    from adapters.shelf.adapter_folder import AdapterMismatchError
    from inference.session import ModelSession

    entry = import_adapter(
        _adapter_naming(random_lora_dir, tmp_path, "someone/elses-model"), name="other"
    )
    base = json.loads((entry.path / "manifest.json").read_text())["base_model"]
    assert base == {"name": "someone/elses-model"}
    with pytest.raises(AdapterMismatchError, match="someone/elses-model"):
        ModelSession(str(tiny_llama_dir), dtype="float32").check_usable("other")
