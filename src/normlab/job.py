"""One Hydra job's ending, as train.py's own job (normlab.cli) and every launcher's (normlab.sweeps) share it:
its exit codes, `JobFailed`, what the console hears of a run's ending (`job_outcome`), a crash before a run
exists recorded in its summary.json, the command that continues it and its W&B group.

It sits below both: cli runs one job and sweeps runs many, each asking here how a job ended, so neither
imports the other for it (tests/test_architecture.py: no circle).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from normlab import distributed, requeue
from normlab.commands import hydra_value
from normlab.errors import UserError

log = logging.getLogger("normlab")

EXIT_FAILED = 2
EXIT_INVALID = 2
EXIT_CRASHED = 1


class JobFailed(UserError):
    """A multirun job ended as failed; raised so Hydra records it and the sweep ends with exit 2."""


def sweep_group() -> str | None:
    """The W&B group of a multirun job: the sweep directory's date and name, shared by all its jobs."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    sweep = Path(hydra_cfg.sweep.dir)
    return f"{sweep.parent.name}_{sweep.name}" if sweep.parent.name else sweep.name


def command_to_resume(task_overrides: list[str], run_dir: Path, resume: str | None) -> str:
    """The command that continues the job of these overrides in `run_dir` (a stacked sweep's members each
    have theirs: one run alone continues from a member's checkpoint)."""
    overrides = [o for o in task_overrides if not o.lstrip("+~").startswith(("train.resume=", "hydra."))]
    extra = [f"hydra.run.dir={hydra_value(str(run_dir))}"]
    if resume:
        extra.insert(0, f"train.resume={hydra_value(resume)}")
    dist = distributed.current()
    launcher = ["torchrun", f"--nproc_per_node={dist.world_size}"] if dist.enabled else ["python"]
    return shlex.join([*launcher, "train.py", *overrides, *extra])


@contextlib.contextmanager
def crash_recorded(cfg: DictConfig, run_dir: Path) -> Iterator[None]:
    """A bug raised inside (before a run exists to record it) is written to `run_dir`'s summary.json as a
    crash with its traceback (docs/errors.md), then raised on."""
    try:
        yield
    except Exception as e:
        if not isinstance(e, UserError):
            from normlab.train.run import Run

            Run(cfg, run_dir).record_crash(e)
            e.normlab_crash = True  # type: ignore[attr-defined]
        raise


def job_outcome(summary: dict[str, Any], run_dir: Path, multirun: bool, run: Any = None) -> Any:
    """What the console hears of a run's ending, and what its job returns: the final validation loss, None
    (interrupted in a sweep), `JobFailed` raised for a failed job of a sweep; outside a sweep a failed,
    invalid or interrupted run exits with its code. `run` (a Run) says a single run's exit code and hands a
    preemption back to its cluster."""
    status = summary["status"]
    if status == "failed":
        if multirun:  # recorded; the sweep prints a reason once, however many jobs share it (sweep_progress)
            raise JobFailed(str(summary["reason"]))
        print(f"error: {summary['reason']}", file=sys.stderr)
        if summary.get("resume_command"):
            print(f"continue with: {summary['resume_command']}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    if status == "invalid":  # the run already logged its one sentence
        if not multirun:
            sys.exit(EXIT_INVALID)
    elif status == "interrupted":
        print(f"interrupted: {summary['reason']} Summary in {run_dir / 'summary.json'}.", file=sys.stderr)
        if run is not None:
            requeue.hand_back(run.stop)  # submitit's preemption signal: it requeues the job and exits
        if multirun:  # the sweep stops and prints the one command that continues all of it
            return None
        if summary.get("resume_command"):
            print(f"resume with: {summary['resume_command']}", file=sys.stderr)
        sys.exit(run.exit_code() if run is not None else EXIT_FAILED)
    else:
        log.info(
            "%s: %s after %d steps, final val loss %s (%s)",
            summary["name"],
            status,
            summary["steps"],
            summary["final_val_loss"],
            run_dir,
        )
    return summary["final_val_loss"]


def fail(reason: str, multirun: bool) -> None:
    """A run directory that cannot be used: its sentence; a sweep's job raises `JobFailed` (Hydra records it
    and the sweep reports it at the end), a single run exits with EXIT_FAILED."""
    print(f"error: {reason}", file=sys.stderr)
    if multirun:
        raise JobFailed(reason)
    sys.exit(EXIT_FAILED)
