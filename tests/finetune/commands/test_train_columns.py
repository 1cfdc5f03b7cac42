"""`python -m finetune train --prompt-column Q --response-column A`: a file whose columns have
other names trains once they are named, as the refusal without them says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_columns_of_other_names_train_once_named(tiny_llama_dir, home, tmp_path):
    data = tmp_path / "support.csv"
    data.write_text(
        "q,a\n" + "".join(f"where is order {i},it ships on day {i}\n" for i in range(12))
    )
    base = [sys.executable, "-m", "finetune", "train", "--model", str(tiny_llama_dir)]
    base += ["--data", str(data), "--max-steps", "1", "--name", "named-columns"]

    def train(*extra: str):
        return subprocess.run(
            [*base, *extra], capture_output=True, text=True, cwd=ROOT, timeout=300
        )

    refused = train()
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "name them with --prompt-column and --response-column" in refused.stderr
    done = train("--prompt-column", "q", "--response-column", "a")
    assert done.returncode == 0, done.stderr
    assert (home / "adapters" / "named-columns" / "adapter_model.safetensors").is_file()
