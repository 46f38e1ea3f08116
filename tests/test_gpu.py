"""Checks that need CUDA; skipped, with the reason, everywhere else (CI and this project's machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TRAIN_PY = str(Path(__file__).parents[1] / "train.py")


def run(tmp_path: Path, cache_dir: Path, *overrides: str, launcher: tuple[str, ...] = ()) -> dict:
    cmd = [*(launcher or (sys.executable,)), TRAIN_PY, "model=tiny", "logger=none", "data=synthetic"]
    cmd += [f"data.cache_dir={cache_dir}", "train.device=cuda", "train.sample_tokens=0", "train.max_steps=30"]
    cmd += [f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_bf16_compiled_run_learns_and_reports_mfu(tmp_path, cache_dir):
    summary = run(tmp_path, cache_dir, "train.precision=bf16", "train.compile=true", "train.peak_flops=1e14")
    assert summary["status"] == "completed"
    assert summary["mfu"] is not None and 0 < summary["mfu"] < 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_torchrun_over_nccl(tmp_path, cache_dir):
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
    summary = run(tmp_path, cache_dir, "train.batch_size=4", launcher=launcher)
    assert summary["world_size"] == 2 and summary["status"] == "completed"
