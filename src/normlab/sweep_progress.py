"""A sweep-level progress line on the terminal: jobs done out of the total, time spent, time left.

A Hydra callback (configs/config.yaml, `hydra.callbacks.sweep_progress`). When a multirun starts, the
parent process counts the jobs the basic sweeper will launch (the product of the swept values, from
`hydra.sweeper.params` and the command line, as Hydra's BasicSweeper expands them) and writes that count
and the start time into the sweep directory. Each job, when it ends — in whatever process the launcher
ran it (joblib workers, submitit, the main process) — appends one line to a shared file there and
prints

    [sweep] 3/6 done · ln-post-L6-w50-s0 completed · 1.2 min elapsed, about 1.2 min left

to stderr. The time left (`time_left`) is the time spent so far scaled by the work left: finished jobs
count whole and running ones by their share of steps (the last row of their metrics.jsonl), so jobs that
run side by side and end close together do not make the estimate jump; jobs a continued sweep skipped
(finished earlier) count as done but not as work of this invocation. A job a signal interrupted is not
done: its line says the sweep is stopping, with no time left (the sweep prints the command that continues
it). The parent's line for jobs running side by side (normlab.sweeps.live) uses the same estimate.
"""

from __future__ import annotations

import contextlib
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
ERRORS_FILE = ".sweep_errors"  # each job's failure reason, so a reason many jobs share is printed once
FINAL = ("completed", "diverged", "invalid", "failed", "crashed")  # a job that ended this way is done
TAIL_BYTES = 8192


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


def last_row(metrics: Path) -> dict | None:
    """The last whole row of a metrics.jsonl, reading only its tail."""
    try:
        with metrics.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                return row
    return None


def max_steps_of(run_dir: Path) -> int | None:
    """train.max_steps from the job's .hydra/config.yaml (as written: a number)."""
    import yaml  # Hydra's own dependency

    with contextlib.suppress(OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return int(yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["train"]["max_steps"])
    return None


def status_of(run_dir: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return str(json.loads((run_dir / "summary.json").read_text())["status"])
    return None


def share_done(run_dir: Path, max_steps: int | None = None) -> float:
    """How much of a running job's steps are done (0 to 1), from the last row of its metrics.jsonl (the
    final evaluation's row, at step max_steps, counts as all of them)."""
    row = last_row(run_dir / "metrics.jsonl")
    total = max_steps if max_steps is not None else max_steps_of(run_dir)
    if row is None or not total:
        return 0.0
    return min((row["step"] + 1) / total, 1.0)


def running_shares(sweep_dir: Path) -> list[float]:
    """The share done of every job in `sweep_dir` whose summary.json says it is running now."""
    shares = []
    with contextlib.suppress(OSError):
        for run_dir in sweep_dir.iterdir():
            if run_dir.is_dir() and not run_dir.name.startswith(".") and status_of(run_dir) == "running":
                shares.append(share_done(run_dir))
    return shares


def time_left(
    elapsed: float, total: int | None, done: int, skipped: int, shares: list[float]
) -> float | None:
    """Seconds left: `elapsed` × work left / work done in this invocation, a running job counting by its share
    of steps, jobs skipped as finished earlier counting as done but not as work done now; None before one
    job's worth of work is done (the jobs' start-up, which the shares do not see, would make it several times
    too long: 15 min said for a demo that took 8) or when no total is known."""
    if not total:
        return None
    running = sum(shares)
    finished_now = (done - skipped) + running
    if finished_now < 1:  # before one job's worth, start-up dominates the time spent: no estimate yet
        return None
    return elapsed * max(total - done - running, 0.0) / finished_now


def done_count(sweep_dir: Path, total: int | None = None) -> int | None:
    """Jobs done so far (this invocation's and those a continued sweep skipped), None before the file exists:
    each job once (its ending recorded twice, or a skipped one run after all, is one job), never more than
    the sweep's `total`."""
    try:
        done = len(set((sweep_dir / DONE_FILE).read_text().split()))
    except OSError:
        return None
    return min(done, total) if total else done


def read_state(sweep_dir: Path) -> dict[str, Any]:
    try:
        state = json.loads((sweep_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {}
    return {
        "total": state.get("total"),
        "started": state.get("started"),
        "skipped": state.get("skipped", 0),
        "jobs": state.get("jobs"),  # each job's overrides: a report names those without a run directory yet
    }


def progress_line(
    done: int,
    total: int | None,
    label: str,
    elapsed: float,
    left: float | None = None,
    stopping: bool = False,
) -> str:
    """The line as each job ends; `left` the seconds left (by default elapsed × jobs left / jobs done),
    `stopping` for a job a signal interrupted: no time left is given, the sweep is stopping."""
    if stopping:
        head = f"[sweep] {done}/{total} done" if total else f"[sweep] {done} done"
        return f"{head} · {label} · {duration(elapsed)} elapsed; the sweep is stopping"
    if not total:
        return f"[sweep] {done} done · {label} · {duration(elapsed)} elapsed"
    if left is None:
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
        (sweep_dir / ERRORS_FILE).unlink(missing_ok=True)
        # the jobs' overrides too: a report on the sweep names those without a run directory yet
        state = {"total": None if jobs is None else len(jobs), "started": time.time(), "jobs": jobs}
        (sweep_dir / STATE_FILE).write_text(json.dumps(state))

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode is None or hydra_cfg.mode.name != "MULTIRUN":
            return
        sweep_dir = Path(hydra_cfg.sweep.dir)
        state = read_state(sweep_dir)
        status = job_status(Path(hydra_cfg.runtime.output_dir), job_return)
        label = f"{config.get('name', hydra_cfg.job.num)} {status}"
        stopping = status == "interrupted"  # not done: the sweep's continue command runs it again
        if not stopping:  # one write with O_APPEND: lines from concurrent jobs never interleave
            fd = os.open(sweep_dir / DONE_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{hydra_cfg.job.num}\n".encode())
            finally:
                os.close(fd)
        done = done_count(sweep_dir, state["total"]) or 0
        elapsed = time.time() - state["started"] if state.get("started") else 0.0
        left = (
            None
            if stopping
            else time_left(elapsed, state["total"], done, state["skipped"], running_shares(sweep_dir))
        )
        reason = failure(Path(hydra_cfg.runtime.output_dir)) if status == "failed" else None
        earlier = first_with(sweep_dir, reason, hydra_cfg.job.num) if reason is not None else None
        first = reason is not None and earlier is None
        if earlier is not None:
            label += f" (the same error as job #{earlier})"
        print(
            progress_line(done, state["total"], label, elapsed, left, stopping), file=sys.stderr, flush=True
        )
        if first:
            print(f"error: {reason}", file=sys.stderr, flush=True)


def mark_done(sweep_dir: Path, nums: list[int]) -> None:
    """Count jobs a continued sweep skips (they finished in an earlier invocation) as done, and as skipped:
    no work of this invocation (`time_left`)."""
    if not nums:
        return
    fd = os.open(sweep_dir / DONE_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(f"{n}\n" for n in nums).encode())
    finally:
        os.close(fd)
    state = read_state(sweep_dir)  # the parent, before any job starts: no other writer
    state["skipped"] = state["skipped"] + len(nums)
    with contextlib.suppress(OSError):
        (sweep_dir / STATE_FILE).write_text(json.dumps(state))


def failure(run_dir: Path) -> str | None:
    """The reason summary.json gives for a failed job (the environment: data, network, device, disk)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return str(json.loads((run_dir / "summary.json").read_text())["reason"])
    return None


def first_with(sweep_dir: Path, reason: str, job: int | str = 0) -> int | str | None:
    """Record that job `job` failed for `reason`; return the job that failed for it first in this sweep, or
    None when that is this one: a missing corpus fails every job the same way, and the sweep says so once.
    Each job appends `pid-job<TAB>reason` in one write and the first line with the reason decides, so two
    jobs failing at once (in two processes, or members of one stack in one) print it once."""
    text = " ".join(reason.split())
    mine = f"{os.getpid()}-{job}\t{text}"
    try:
        fd = os.open(sweep_dir / ERRORS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{mine}\n".encode())
        finally:
            os.close(fd)
        recorded = (sweep_dir / ERRORS_FILE).read_text().splitlines()
    except OSError:
        return None
    firsts = [r for r in recorded if r.split("\t", 1)[-1] == text]
    if not firsts or firsts[0] == mine:
        return None
    return firsts[0].split("\t", 1)[0].split("-", 1)[-1]


def job_status(run_dir: Path, job_return: Any) -> str:
    """The run's summary.json status, else Hydra's view of the job (completed / failed)."""
    try:
        return str(json.loads((run_dir / "summary.json").read_text())["status"])
    except (OSError, ValueError, KeyError):
        status = getattr(getattr(job_return, "status", None), "name", "")
        return "completed" if status == "COMPLETED" else "failed"
