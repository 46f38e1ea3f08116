"""Finding run directories: the run-directory contract's file names, and the search through sweeps."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.summary import OUTCOME_FIELDS

# File names of the run-directory contract (the training side defines them in normlab.train.run; they
# are repeated here so that analysis does not import torch).
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = ".hydra/config.yaml"
HYDRA_FILE = ".hydra/hydra.yaml"
OVERRIDES_FILE = ".hydra/overrides.yaml"
# What a sweep's parent records in the sweep directory (normlab.sweep_progress): its jobs' overrides, so that
# a report names the jobs that have no run directory yet
SWEEP_RECORD = ".sweep_progress.json"
MULTIRUN_FILE = "multirun.yaml"
RUN_MARKERS = (SUMMARY_FILE, METRICS_FILE, CONFIG_FILE)
# Subdirectories of a run that never hold runs themselves.
SKIP_DIRS = {".hydra", "checkpoints", "spikes", "wandb", "report", "__pycache__"}

SEED_KEY = "seed"
# Config keys that never define a variant: run names (derived from the rest), bookkeeping, speed-only knobs.
NON_VARIANT_KEYS = (
    "name",
    "experiment",
    "experiment_name",
    "train.resume",
    "train.progress",
    "train.sample_prompt",
    "train.sample_tokens",
    "train.ckpt_every",
    "train.flush_every",
    "train.num_threads",
    "data.cache_dir",
)
NON_VARIANT_PREFIXES = ("logger", "hydra")
# Groups whose chosen value is shown bare in variant labels ("ln, pre" rather than "norm=ln, placement=pre").
BARE_LABEL_KEYS = ("norm.name", "placement.name")

# summary.json fields read into `RunSet.runs`: the outcome fields RunSummary declares (normlab.summary);
# older runs without some of them read as missing.
SUMMARY_FIELDS = OUTCOME_FIELDS
# summary.json fields that mirror config keys: used when .hydra/config.yaml is missing.
SUMMARY_TO_CONFIG = {
    "norm": "norm.name",
    "placement": "placement.name",
    "depth": "depth",
    "warmup_steps": "warmup_steps",
    "seed": "seed",
    "name": "name",
}

MISSING = "<missing>"


class NoRunsFound(ValueError):
    """None of the given paths is, or contains, a run directory."""


class UnknownKey(ValueError):
    """A config key asked for (grid axis, group_by) is not in the runs, or is ambiguous."""


# ----------------------------------------------------------------------------------------------- discovery


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds any of a run's files (a link or other non-regular file included: the report then
    names it as not read, rather than leaving the run out unsaid)."""
    return any(os.path.lexists(path / marker) for marker in RUN_MARKERS)


def is_sweep_dir(path: Path) -> bool:
    return any(os.path.lexists(path / name) for name in (SWEEP_RECORD, MULTIRUN_FILE))


def _natural_key(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


@dataclass
class Found:
    """What a search through the given directories found: run directories, and links to directories that
    it did not follow (a report reads only what lies inside the directories it is given)."""

    run_dirs: list[Path]
    links: list[Path] = field(default_factory=list)


def discover(paths: Iterable[str | Path]) -> Found:
    """Every run directory at or under `paths`, in natural order (job 2 before job 10), without repeats; a
    symbolic link below a given path is not followed but listed in `links`."""
    found: dict[Path, None] = {}
    links: list[Path] = []
    for raw in paths:
        root = Path(raw)
        if not root.exists():
            raise FileNotFoundError(f"{root} does not exist")
        if is_run_dir(root):
            found[root.resolve()] = None
            continue
        stack = [root]
        hits = []
        while stack:
            d = stack.pop()
            for child in d.iterdir():
                if child.name in SKIP_DIRS:
                    continue
                if child.is_symlink():
                    if child.is_dir():
                        links.append(child)
                    continue
                if not child.is_dir():
                    continue
                if is_run_dir(child):
                    hits.append(child)
                else:
                    stack.append(child)
        for hit in sorted(hits, key=_natural_key):
            found[hit.resolve()] = None
    return Found(list(found), sorted(links, key=_natural_key))


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or under `paths`, in natural order (job 2 before job 10), without repeats."""
    return discover(paths).run_dirs
