"""Running `python train.py` in this process (fast: torch is imported once) and reading what it left."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiny_run import CORPUS, SHORT

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"

# Everything but the corpus: a tiny model for a few steps (tests/conftest.py's TINY, split in two so that a
# test can pick another corpus).
BASE = [*SHORT, "train.sample_tokens=0"]
SYNTHETIC = CORPUS


@dataclass
class CliRun:
    code: int
    output: str  # stdout and stderr together
    run_dir: Path

    @property
    def summary(self) -> dict[str, Any] | None:
        path = self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.run_dir / "metrics.jsonl").read_text().splitlines()]


def base_overrides(extra: list[str], cache_dir: Path) -> list[str]:
    """BASE plus the small synthetic corpus, unless `extra` picks another corpus."""
    corpus = [] if any(o.startswith("data=") for o in extra) else SYNTHETIC
    return [*BASE, *corpus, f"data.cache_dir={cache_dir}", "data.vocab_size=512"]
