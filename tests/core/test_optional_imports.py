"""A process that quantizes nothing keeps bitsandbytes out (peft imports it when installed, 1.3-1.5
s of every start here), and still reports it installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("bitsandbytes")


def run_python(code: str):
    """What a fresh interpreter running ``code`` printed last, as JSON."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_peft_loads_without_bitsandbytes_and_the_hardware_still_reports_it():
    seen = run_python(
        "import json, sys\n"
        "from core.optional_imports import keep_bitsandbytes_out\n"
        "keep_bitsandbytes_out()\n"
        "import peft, transformers\n"
        "from peft import LoraConfig, get_peft_model\n"
        "from core.hardware import detect\n"
        "print(json.dumps({'loaded': sys.modules.get('bitsandbytes') is not None,"
        " 'reported': detect().bitsandbytes, 'peft_bnb': peft.import_utils.is_bnb_available()}))"
    )
    from importlib.metadata import version

    assert seen == {"loaded": False, "reported": version("bitsandbytes"), "peft_bnb": False}


def test_only_a_process_started_as_the_command_counts_as_it(tmp_path):
    (tmp_path / "probe_entry.py").write_text(
        "import json\nfrom core.optional_imports import started_as\n"
        "print(json.dumps([started_as('probe_entry'), started_as('finetune')]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    out = subprocess.run(
        [sys.executable, "-m", "probe_entry"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False]
    assert (
        run_python(
            "import json\nfrom core.optional_imports import started_as\n"
            "print(json.dumps(started_as('finetune')))"
        )
        is False
    )
