"""What a report covers of the directories it is given: the runs it could not read, and a sweep's jobs that
have no run directory yet (a sweep stopped, or still starting).

A sweep's parent records its jobs' overrides in the sweep directory when it starts (`.sweep_progress.json`,
normlab.sweep_progress), and each run directory keeps its job's (`.hydra/overrides.yaml`): a job is known by
its overrides, `train.resume` and Hydra's own aside, as the sweep launchers know it (normlab.sweeps.jobs), so
a job whose overrides no run directory carries has not started. A sweep recorded before the jobs were (only
their number) is counted instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.analysis.load.discover import SWEEP_RECORD, is_sweep_dir
from normlab.analysis.load.files import NotReadable, text_inside

JobKey = tuple[str, ...]


@dataclass(frozen=True)
class SweepRecord:
    """A sweep directory's record: its jobs' overrides (None where only their number was recorded)."""

    path: Path
    total: int | None
    jobs: list[list[str]] | None


def _key_of(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def job_key(overrides: Iterable[str]) -> JobKey:
    """A job's identity: its overrides, sorted, without train.resume or hydra.* (normlab.sweeps.jobs)."""
    return tuple(
        sorted(o for o in overrides if _key_of(o) != "train.resume" and not _key_of(o).startswith("hydra"))
    )


def read_record(sweep_dir: Path) -> SweepRecord | None:
    """The jobs `sweep_dir`'s parent recorded, None where it is no sweep directory or has no readable record."""
    if not is_sweep_dir(sweep_dir):
        return None
    try:
        text = text_inside(sweep_dir, SWEEP_RECORD)
        record = json.loads(text) if text is not None else None
    except (NotReadable, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    total = record.get("total")
    jobs = record.get("jobs")
    if isinstance(jobs, list) and all(isinstance(j, list) for j in jobs):
        jobs = [[str(o) for o in j] for j in jobs]
    else:
        jobs = None
    return SweepRecord(sweep_dir, total if isinstance(total, int) and total >= 0 else None, jobs)


def labels(job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Each job's overrides that differ between the jobs (all of them for a one-job sweep)."""
    common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    return [
        " ".join(o for o in ov if o not in common and _key_of(o) != "train.resume") for ov in job_overrides
    ]


@dataclass(frozen=True)
class Missing:
    """A sweep's jobs without a run directory: how many of its `total`, and which (their overrides that tell
    them apart; None where the sweep recorded only its number of jobs)."""

    count: int
    total: int | None
    jobs: list[str] | None = None


def missing_jobs(record: SweepRecord, run_overrides: Sequence[Sequence[str] | None]) -> Missing | None:
    """The jobs of the sweep `record` describes that none of the runs found in it is (by their overrides;
    `run_overrides`: one entry per run directory found in the sweep directory), None when none is missing."""
    if record.jobs is None:
        found = len(run_overrides)
        if record.total is None or found >= record.total:
            return None
        return Missing(record.total - found, record.total)
    seen = {job_key(o) for o in run_overrides if o is not None}
    names = labels(record.jobs)
    jobs = [
        name or "its one job"
        for job, name in zip(record.jobs, names, strict=True)
        if job_key(job) not in seen
    ]
    return Missing(len(jobs), len(record.jobs), jobs) if jobs else None


def inside(run_dir: Path, sweep_dir: Path) -> bool:
    try:
        return sweep_dir.resolve() in run_dir.resolve().parents
    except OSError:
        return False
