"""A sweep-level progress line on the terminal: jobs done out of the total, time spent, time left.

A Hydra callback (configs/config.yaml, `hydra.callbacks.sweep_progress`). When a multirun starts, the
parent process counts the jobs the basic sweeper will launch (the product of the swept values, from
`hydra.sweeper.params` and the command line, as Hydra's BasicSweeper expands them) and writes that count
and the start time into the sweep directory. Each job, when it ends — in whatever process the launcher
ran it (joblib workers, submitit, the main process) — appends one line to a shared file there and
prints

    [sweep] 3/6 done · ln-post-L6-w50-s0 completed · 1.2 min elapsed, about 1.2 min left

to stderr. The estimate is elapsed × (jobs left / jobs done): the jobs of a sweep take similar times.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

STATE_FILE = ".sweep_progress.json"
DONE_FILE = ".sweep_done"


def count_jobs(config: DictConfig) -> int | None:
    """Jobs the basic sweeper launches for this multirun config, or None for other sweepers."""
    jobs = sweep_jobs(config)
    return None if jobs is None else len(jobs)


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job the basic sweeper launches for this multirun config (None for other
    sweepers), as Hydra's BasicSweeper expands them."""
    sweeper = config.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    params += list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params), None)
    return [list(job) for job in batches[0]]


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def progress_line(done: int, total: int | None, label: str, elapsed: float) -> str:
    if not total:
        return f"[sweep] {done} done · {label} · {duration(elapsed)} elapsed"
    left = elapsed * (total - done) / done if done else float("nan")
    tail = "all done" if done >= total else f"about {duration(left)} left"
    return f"[sweep] {done}/{total} done · {label} · {duration(elapsed)} elapsed, {tail}"


class SweepProgress(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        try:
            jobs = sweep_jobs(config)
        except Exception:  # an unusual sweep syntax: progress without a total, never a failed sweep
            jobs = None
        (sweep_dir / DONE_FILE).unlink(missing_ok=True)
        # the jobs' overrides too: a report on the sweep names those without a run directory yet
        state = {"total": None if jobs is None else len(jobs), "started": time.time(), "jobs": jobs}
        (sweep_dir / STATE_FILE).write_text(json.dumps(state))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode is None or hydra_cfg.mode.name != "MULTIRUN":
            return
        sweep_dir = Path(hydra_cfg.sweep.dir)
        try:
            state = json.loads((sweep_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            state = {"total": None, "started": None}
        label = f"{config.get('name', hydra_cfg.job.num)} {job_status(Path(hydra_cfg.runtime.output_dir), job_return)}"
        # one write with O_APPEND: lines from concurrent jobs never interleave
        fd = os.open(sweep_dir / DONE_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{hydra_cfg.job.num}\n".encode())
        finally:
            os.close(fd)
        done = done_count(sweep_dir, state.get("total"))
        elapsed = time.time() - state["started"] if state.get("started") else 0.0
        print(progress_line(done, state.get("total"), label, elapsed), file=sys.stderr, flush=True)


def done_count(sweep_dir: Path, total: int | None) -> int:
    """The jobs that have ended: each job once (its ending recorded twice, or a skipped one run after all,
    is one job), never more than the sweep's `total`."""
    done = len(set((sweep_dir / DONE_FILE).read_text().split()))
    return min(done, total) if total else done


def mark_done(sweep_dir: Path, nums: list[int]) -> None:
    """Count jobs a continued sweep skips (they finished in an earlier invocation) as done."""
    if not nums:
        return
    fd = os.open(sweep_dir / DONE_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(f"{n}\n" for n in nums).encode())
    finally:
        os.close(fd)


def job_status(run_dir: Path, job_return: Any) -> str:
    """The run's summary.json status, else Hydra's view of the job (completed / failed)."""
    try:
        return str(json.loads((run_dir / "summary.json").read_text())["status"])
    except (OSError, ValueError, KeyError):
        status = getattr(getattr(job_return, "status", None), "name", "")
        return "completed" if status == "COMPLETED" else "failed"
