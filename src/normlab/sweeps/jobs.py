"""The jobs of one sweep invocation: which run directory each uses, and what `train.resume=auto` will do there.

A job is known by its overrides, not by its number: each run directory keeps the overrides Hydra gave its
job (`.hydra/overrides.yaml`), so a sweep run again — with its values in another order, with jobs added —
finds each job's directory by those overrides (`train.resume` aside) and gives the job that directory
(`hydra.sweep.subdir=NAME`). A job with no directory yet gets Hydra's usual `NUM_NAME`, or the next free
number where that name is taken by another job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from normlab.commands import hydra_value, override_key
from normlab.summary import SUMMARY_FILE
from normlab.train import run_dir as directories

JobKey = tuple[str, ...]


def job_key(overrides: Sequence[str]) -> JobKey:
    """What identifies a job across invocations: its overrides, sorted, without train.resume or hydra.*."""
    return tuple(
        sorted(
            o
            for o in overrides
            if override_key(o) != "train.resume" and not override_key(o).startswith("hydra")
        )
    )


@dataclass
class Job:
    num: int
    overrides: list[str]  # as the sweeper made them, plus hydra.sweep.subdir when the job reuses a directory
    label: str = ""  # the overrides that tell this job from the others of the sweep
    run_dir: Path | None = None  # known before launch when the sweep directory already held runs
    plan: directories.Plan | None = None  # train.resume=auto's answer for run_dir; None for a fresh sweep

    @property
    def skipped(self) -> bool:
        return self.plan is not None and self.plan.action == directories.SKIP


@dataclass
class SweepJobs:
    sweep_dir: Path
    jobs: list[Job]
    resumed: bool = False  # the sweep directory held runs of an earlier invocation
    busy: list[Job] = field(default_factory=list)  # jobs whose directory a live process holds


def labels(job_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Each job's overrides that differ between the jobs (all of them for a one-job sweep)."""
    common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    return [
        " ".join(o for o in ov if o not in common and override_key(o) != "train.resume")
        for ov in job_overrides
    ]


def recorded_jobs(sweep_dir: Path) -> dict[JobKey, Path]:
    """The run directories an earlier invocation left in `sweep_dir`, by their jobs' overrides."""
    found: dict[JobKey, Path] = {}
    if not sweep_dir.is_dir():
        return found
    for run_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
        except (OSError, yaml.YAMLError):
            continue  # not a job directory (or one whose start was cut short before Hydra wrote it)
        if isinstance(overrides, list):
            found.setdefault(job_key([str(o) for o in overrides]), run_dir)
    return found


def recorded_max_steps(run_dir: Path) -> int | None:
    try:
        config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
        return int(config["train"]["max_steps"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def job_config(context: HydraContext, config: DictConfig, overrides: Sequence[str], num: int) -> DictConfig:
    """The job's composed config, as a launcher composes it (hydra.job.num set)."""
    cfg = context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(cfg):
        cfg.hydra.job.num = num
        cfg.hydra.job.id = f"{cfg.hydra.job.name}_{num}"
    return cfg


def default_subdir(cfg: DictConfig) -> tuple[str, str]:
    """(the job's subdirectory as the config names it, the run name) — e.g. ("3_ln-pre-…", "ln-pre-…")."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)  # ${hydra:...} in a subdir pattern resolves against this job
    return str(OmegaConf.select(cfg, "hydra.sweep.subdir")), str(cfg.get("name", ""))


def plan_jobs(
    context: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]], first_num: int
) -> SweepJobs:
    """Number the jobs, and where the sweep directory already holds runs, give each its directory and plan."""
    from normlab.sweeps.names import distinct_names  # every swept value in the run's name

    sweep_dir = Path(str(config.hydra.sweep.dir))
    names = labels(job_overrides)
    named = distinct_names(config, job_overrides)
    jobs = [
        Job(first_num + i, [*o, *([named[i]] if named[i] else [])], names[i])
        for i, o in enumerate(job_overrides)
    ]
    recorded = recorded_jobs(sweep_dir)
    if not recorded:
        return SweepJobs(sweep_dir, jobs)
    taken = {p.name for p in sweep_dir.iterdir() if p.is_dir()}
    used: set[str] = set()
    result = SweepJobs(sweep_dir, jobs, resumed=True)
    with _hydra_config_kept():
        for job in jobs:
            _place(job, recorded, context, config, sweep_dir, taken, used, len(jobs) + first_num)
            if job.plan is not None and job.plan.action == directories.BUSY:
                result.busy.append(job)
    return result


@contextlib.contextmanager
def _hydra_config_kept() -> Iterator[None]:
    """Composing a job's config sets Hydra's global job config; the launcher's own comes back after."""
    from hydra.core.hydra_config import HydraConfig

    before = HydraConfig.instance().cfg
    try:
        yield
    finally:
        HydraConfig.instance().cfg = before


def _place(
    job: Job,
    recorded: dict[JobKey, Path],
    context: HydraContext,
    config: DictConfig,
    sweep_dir: Path,
    taken: set[str],
    used: set[str],
    first_free: int,
) -> None:
    """Give `job` its recorded directory, or a new one no other job has, and its plan there."""
    run_dir = recorded.get(job_key(job.overrides))
    if run_dir is None:  # recorded before run names carried every swept value: continued as it was
        unnamed = [o for o in job.overrides if not _added_name(o)]
        run_dir = recorded.get(job_key(unnamed))
        if run_dir is not None:
            job.overrides = unnamed
    max_steps = recorded_max_steps(run_dir) if run_dir is not None else None
    if run_dir is None:
        subdir, name = default_subdir(job_config(context, config, job.overrides, job.num))
        n = first_free
        # a number another job's directory has: the next free one, so that no two directories share one
        while any(d == subdir or d.startswith(f"{subdir.split('_', 1)[0]}_") for d in taken | used):
            subdir, n = f"{n}_{name}", n + 1
        run_dir = sweep_dir / subdir
    used.add(run_dir.name)
    job.overrides.append(f"hydra.sweep.subdir={hydra_value(run_dir.name)}")
    job.run_dir = run_dir
    job.plan = directories.plan(run_dir, max_steps)


def _added_name(override: str) -> bool:
    return override_key(override) == "name"


def summary_of(run_dir: Path | None) -> dict[str, Any] | None:
    import json

    if run_dir is None:
        return None
    try:
        data = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def started(run_dir: Path | None) -> bool:
    return run_dir is not None and (summary_of(run_dir) is not None or directories.holds_results(run_dir))
