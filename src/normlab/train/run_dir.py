"""A run's directory, owned here: its files, the lock that lets one run in at a time, what it holds, and what
a new run or `train.resume=auto` may do with it.

Before Hydra writes anything there, the directory is *claimed* (`claim_run_dir` for a run, `claim_sweep_dir`
for a sweep; normlab.cli.RunDirGuard calls them and says the sentence): created, locked, and only then checked
— a file in the way, a live run there, or an earlier run's results (kept unless the run continues them) are
refused, the lock let go, and nothing written. Checking before locking would let two starts at the same
moment both pass the check and both write `.hydra/` before one of them got the lock. The claim is this
process's until the command ends (`release_claims`); the run's own `RunDirectory.acquire` then adopts it, so
that library code that starts a `Run` without the command line takes the same lock itself.

The lock is an OS file lock (flock) on `.run.lock`: the kernel releases it when its process ends however it
ends (SIGKILL, out of memory, power loss), so a `running` summary.json beside a free lock means that run
died without saving — `in_use` tells the two apart.

`train.resume=auto` reads the directory's state from its summary.json, its lock and its checkpoints (`plan`):

| state | next |
|---|---|
| nothing there yet (or only Hydra's `.hydra/`) | start |
| `completed` / `diverged` with at least `train.max_steps` steps | skip: nothing to do |
| `completed` with fewer steps than `train.max_steps` | resume from its newest checkpoint, train on |
| `interrupted` (a signal) | resume from `last.pt`; start if it stopped before saving one |
| `running` with a free lock: its process died without saving (SIGKILL, out of memory, power loss) | resume from its newest checkpoint, or start again from step 0 if it saved none |
| `failed`, `crashed`, `invalid` | the same: resume from its newest checkpoint, else start again |
| `running` with its lock held by a live process | busy: refused |

The sweep launchers (normlab.sweeps) ask this for every job before launching any, to skip finished jobs and
to say what happens to each; the run itself asks again under its own lock and acts on the answer. Starting
again in a directory that holds rows drops them first, so metrics.jsonl never has a step twice.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from normlab.commands import hydra_value
from normlab.errors import UserError
from normlab.io import remove_stale_temps
from normlab.summary import SUMMARY_FILE
from normlab.train.logged_rows import METRICS_FILE, continuable, rows_cover, training_losses

log = logging.getLogger("normlab")

LOCK_FILE = ".run.lock"
SAMPLE_FILE = "sample.txt"
# OSErrors that mean "the disk", not a bug: full, over quota, read-only, gone
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}

AUTO = "auto"  # train.resume=auto
START, SKIP, RESUME, BUSY = "start", "skip", "resume", "busy"
FINISHED = ("completed", "diverged")


# ----------------------------------------------------------------------------------------------------
# What the directory holds
# ----------------------------------------------------------------------------------------------------


def in_use(directory: Path) -> bool:
    """Whether a live process holds `directory`'s lock (the lock file alone proves nothing)."""
    path = directory / LOCK_FILE
    if not path.exists():
        return False
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    except OSError:
        return False
    lock.release()
    return False


def holds_results(directory: Path) -> bool:
    """Whether a run trained in `directory`: metrics rows or checkpoints (an invalid or failed start leaves
    neither)."""
    from normlab.train.checkpoint import CHECKPOINT_DIR  # here: reading a directory needs no torch

    checkpoints = directory / CHECKPOINT_DIR
    return (directory / METRICS_FILE).exists() or (checkpoints.is_dir() and any(checkpoints.glob("*.pt")))


def _summary(directory: Path) -> dict:
    try:
        summary = json.loads((directory / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def read_reason(directory: Path) -> str | None:
    """summary.json's reason (why the run did not complete), None where it has none."""
    reason = _summary(directory).get("reason")
    return reason if isinstance(reason, str) and reason.strip() else None


def _clause(reason: str) -> str:
    """The first clause of a run's reason, as the cause in a sentence ("Could not write …/metrics.jsonl (No
    space left on device)")."""
    first = reason.strip().split("; ")[0].rstrip(".")
    return first if len(first) <= 200 else first[:197] + "…"


def read_status(directory: Path) -> tuple[str | None, int]:
    """(summary.json's status, its steps), or (None, 0) where there is no readable summary."""
    summary = _summary(directory)
    try:
        steps = int(summary.get("steps") or 0)
    except (TypeError, ValueError):
        steps = 0
    return summary.get("status"), steps


# ----------------------------------------------------------------------------------------------------
# The sentences: each written once
# ----------------------------------------------------------------------------------------------------


def _busy(directory: Path, what: str = "run") -> str:
    key = "hydra.sweep.dir" if what == "sweep" else "hydra.run.dir"
    return (
        f"Another {what} is using {directory} right now (it holds {LOCK_FILE}); wait for it to end, or point "
        f"{key} somewhere else."
    )


def _file_in_the_way(directory: Path) -> str | None:
    for parent in (directory, *directory.parents):
        if parent.exists():
            if not parent.is_dir():
                return (
                    f"Cannot create the run directory {directory}: {parent} is a file; point hydra.run.dir (or "
                    "hydra.sweep.dir) somewhere else."
                )
            return None
    return None


def continues(directory: Path, resume: str | None) -> bool:
    """Whether `train.resume` continues the run in `directory` (auto, or a path inside it)."""
    if resume == AUTO:
        return True
    if resume:
        with contextlib.suppress(OSError):
            target = Path(resume).expanduser().resolve()
            return target == directory.resolve() or directory.resolve() in target.parents
    return False


def _holds_a_run(directory: Path) -> str:
    status, _ = read_status(directory)
    was = f" (status: {status})" if status is not None else ""
    return (
        f"{directory} already holds a run{was}; continue it with train.resume=auto "
        f"hydra.run.dir={hydra_value(str(directory))} (from its newest checkpoint, or from step 0 if it saved "
        "none), or choose a new hydra.run.dir so nothing there is overwritten."
    )


def disk_error(exc: OSError) -> UserError:
    where = f" {exc.filename}" if exc.filename else ""
    return UserError(
        f"Could not write{where} ({exc.strerror or exc}); free some space or point hydra.run.dir at a disk with "
        "room and write access — everything written before is intact."
    )


# ----------------------------------------------------------------------------------------------------
# Before Hydra writes anything: may a new run (or sweep) use the directory?
# ----------------------------------------------------------------------------------------------------


def run_problem(directory: Path, resume: str | None) -> str | None:
    """Why `directory` cannot take a new run with this `train.resume`, or None: a file in the way, a live run
    there, or an earlier run's results (kept unless the run continues them). A look from outside, without
    the lock: `claim_run_dir` asks the same under it."""
    problem = _file_in_the_way(directory)
    if problem is not None or not directory.is_dir():
        return problem
    if in_use(directory):
        return _busy(directory)
    if not holds_results(directory) or continues(directory, resume):
        return None  # nothing there worth keeping (e.g. the summary of an invalid run), or continuing it
    return _holds_a_run(directory)


def sweep_problem(directory: Path, resume: str | None, continue_command: Callable[[], str]) -> str | None:
    """Why the sweep directory cannot take this sweep, or None; one that holds an earlier sweep's runs is
    continued only with train.resume=auto (normlab.sweeps: finished jobs skipped, the others resumed), the
    command `continue_command()` says."""
    problem = _file_in_the_way(directory)
    if problem is not None or not directory.is_dir():
        return problem
    if in_use(directory):
        return _busy(directory, "sweep")
    return _holds_a_sweep(directory, resume, continue_command)


def _holds_a_sweep(directory: Path, resume: str | None, continue_command: Callable[[], str]) -> str | None:
    jobs = [p for p in directory.iterdir() if p.is_dir() and holds_results(p)]
    if jobs and resume != AUTO:
        return (
            f"{directory} already holds a sweep ({len(jobs)} runs); continue it with {continue_command()} "
            "(finished jobs are skipped, the others resumed or started), or choose a new hydra.sweep.dir so "
            "nothing there is overwritten."
        )
    return None


# ----------------------------------------------------------------------------------------------------
# Claiming a directory: locked first, then checked, before anything is written into it
# ----------------------------------------------------------------------------------------------------

# The directories this process has claimed, by resolved path. Process-wide on purpose: an OS lock belongs to
# the process that holds it, and the Run started later in the same process adopts the claim instead of
# taking a second lock on the same file, which the kernel would refuse.
_CLAIMS: dict[Path, RunDirectory] = {}


def _claim(directory: Path, what: str, problem: Callable[[], str | None]) -> RunDirectory:
    """Create `directory`, lock it, and only then ask `problem()`; a problem lets go of the lock and is raised
    (UserError: nothing has been written there but the lock file)."""
    in_the_way = _file_in_the_way(directory)
    if in_the_way is not None:
        raise UserError(in_the_way)
    claim = RunDirectory(directory, what=what)
    claim.acquire()
    try:
        found = problem()
    except BaseException:
        claim.release()
        raise
    if found is not None:
        claim.release()
        raise UserError(found)
    _CLAIMS[directory.resolve()] = claim
    return claim


def claim_run_dir(directory: Path, resume: str | None) -> RunDirectory:
    """Own `directory` for a new run (or one that continues the run there, per `train.resume`) before anything
    is written into it; UserError with the sentence of `run_problem` otherwise."""
    return _claim(
        directory,
        "run",
        lambda: (
            None if not holds_results(directory) or continues(directory, resume) else _holds_a_run(directory)
        ),
    )


def claim_sweep_dir(directory: Path, resume: str | None, continue_command: Callable[[], str]) -> RunDirectory:
    """Own the sweep directory before Hydra writes its multirun.yaml (the sweep's parent holds it while the
    sweep runs); UserError with the sentence of `sweep_problem` otherwise."""
    return _claim(directory, "sweep", lambda: _holds_a_sweep(directory, resume, continue_command))


def claimed(directory: Path) -> RunDirectory | None:
    """This process's claim on `directory`, if it holds one."""
    try:
        return _CLAIMS.get(directory.resolve())
    except OSError:
        return None


def unclaim(directory: Path) -> None:
    """Let go of this process's claim on `directory` (if it holds one)."""
    with contextlib.suppress(OSError):
        claim = _CLAIMS.pop(directory.resolve(), None)
        if claim is not None:
            claim.release()


def release_claims() -> None:
    """Let go of every directory this process claimed (the command line calls it when it ends)."""
    while _CLAIMS:
        _, claim = _CLAIMS.popitem()
        claim.release()


# ----------------------------------------------------------------------------------------------------
# train.resume=auto: what to do with what the directory holds
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What to do with one run directory: `action` is start, skip, resume or busy; `checkpoint` and `step`
    are set for resume; `sentence` says why, for the console."""

    action: str
    sentence: str
    checkpoint: Path | None = None
    step: int | None = None
    status: str | None = None  # the summary's status before this run, None if there was none


def plan(directory: Path, max_steps: int | None, *, check_lock: bool = True) -> Plan:
    """What `train.resume=auto` does with `directory`. `check_lock=False` when the caller holds its lock.

    It resumes from the newest checkpoint that is whole (every byte), of the history metrics.jsonl holds,
    and whose steps metrics.jsonl has every row of (normlab.train.logged_rows.continuable), so that a
    truncated or deleted metrics.jsonl never leaves a hole — the steps without rows are trained again (from
    an older step checkpoint, or from step 0 when none is old enough) — and two histories never mix."""
    from normlab.train.checkpoint import CHECKPOINT_DIR, candidates  # here: a sweep's parent needs torch now

    status, steps = read_status(directory)
    if check_lock and directory.is_dir() and in_use(directory):
        return Plan(
            BUSY,
            f"another process is running it right now (it holds {directory / LOCK_FILE})",
            status=status,
        )
    if status is None and not holds_results(directory):
        return Plan(START, "not started yet: starting it", status=None)
    losses = training_losses(directory)
    logged = list(losses)
    covered = rows_cover(logged)
    finished = status in FINISHED and (status == "diverged" or max_steps is None or steps >= max_steps)
    if finished and (status == "diverged" or covered >= steps):
        return Plan(SKIP, f"{status} ({steps} steps): skipped", status=status)
    if finished:
        why = f"{status} ({steps} steps)"
    elif status in FINISHED:
        why = f"completed {steps} of now {max_steps} steps"
    elif status == "interrupted":
        why = f"interrupted at step {steps}"
    elif status in (None, "running"):
        why = "left running by a process that ended without saving (SIGKILL, out of memory, power loss)"
    else:
        why = f"ended as {status}" + (f" ({_clause(reason)})" if (reason := read_reason(directory)) else "")
    found, note = continuable(directory / CHECKPOINT_DIR, losses, covered)
    why += note
    if found is None:
        if candidates(directory / CHECKPOINT_DIR):
            return Plan(
                START, f"{why}; no checkpoint it can continue, so it starts again from step 0", status=status
            )
        return Plan(START, f"{why}; no checkpoint was saved, so it starts again from step 0", status=status)
    path, step = found
    return Plan(
        RESUME,
        f"{why}; resuming from {CHECKPOINT_DIR}/{path.name} (step {step})",
        checkpoint=path,
        step=step,
        status=status,
    )


# ----------------------------------------------------------------------------------------------------
# The run's hold on it
# ----------------------------------------------------------------------------------------------------


class RunDirectory:
    """`acquire` creates `path`, takes its lock (one run at a time), checks that it is writable and removes
    stale temporary files in it and in `subdirs`; `release` lets the next run in. A directory this process
    has already claimed (`claim_run_dir`) is adopted: its lock stays with the claim."""

    def __init__(self, path: Path, subdirs: tuple[str, ...] = (), what: str = "run") -> None:
        self.path, self.subdirs, self.what = path, subdirs, what
        self._lock: FileLock | None = None
        # what train.resume was decided to do here when the directory was claimed (normlab.train.resume.admit),
        # kept for the run that adopts the claim to act on, not decide again
        self.decision: object | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self) -> None:
        adopted = claimed(self.path)
        if adopted is None or not adopted.held:
            self._lock = self._take_lock()
        try:
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write_test."):
                pass
        except OSError as e:
            self.release()
            raise self._unwritable(e) from None
        for d in (self.path, *(self.path / s for s in self.subdirs)):
            for p in remove_stale_temps(d):
                log.info("removed %s, left by a write that was cut short", p)

    def _take_lock(self) -> FileLock:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.path / LOCK_FILE))
            lock.acquire(timeout=0)
        except Timeout:
            raise UserError(_busy(self.path, self.what)) from None
        except OSError as e:
            raise self._unwritable(e) from None
        return lock

    def _unwritable(self, e: OSError) -> UserError:
        return UserError(
            f"Cannot write to the run directory {self.path} ({e.strerror or e}); "
            "point hydra.run.dir (or hydra.sweep.dir) at a writable place."
        )

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
