"""Fixtures of the reproduction tests: the crafted-sweep helpers, and one real tiny preset sweep run
through scripts/reproduce.py (shared by the CLI and notebook tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import CORPUS, LOOP

ROOT = Path(__file__).resolve().parents[2]

# Sizes every preset down to seconds; the preset's own sweep (placements, seeds, …) is kept.
TINY = [
    *LOOP,
    *CORPUS,
    "train.batch_size=8",
    "train.max_steps=4",
    "train.eval_every=2",
    "train.sample_tokens=0",
    "metrics.every=2",
    "warmup_steps=2",
]


@pytest.fixture(scope="session")
def tiny(cache_dir: Path) -> list[str]:
    return [*TINY, f"data.cache_dir={cache_dir}"]


@pytest.fixture(scope="session")
def tiny_reproduction(tmp_path_factory: pytest.TempPathFactory, tiny: list[str]) -> Path:
    """`scripts/reproduce.py xiong_warmup` with tiny overrides and two seeds: 8 jobs of 4 steps through
    the joblib launcher, then REPORT.md. Returns the output directory."""
    out = tmp_path_factory.mktemp("reproduce")
    keep = [o for o in tiny if not o.startswith("warmup_steps")]  # the preset sweeps the warmup
    overrides = [a for o in [*keep, "seed=0,1"] for a in ("--override", o)]
    cmd = [sys.executable, "scripts/reproduce.py", "xiong_warmup", "--out", str(out), *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out
