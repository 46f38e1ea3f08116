"""A run's directory: made writable, held by one run at a time, swept of a killed writer's temporary files.

The lock is an OS file lock (flock) on `.run.lock`: the kernel releases it when its process ends however it
ends (SIGKILL, out of memory, power loss), so a `running` summary.json beside a free lock means that run
died without saving — `in_use` tells the two apart.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from filelock import FileLock, Timeout

from normlab.errors import UserError
from normlab.io import remove_stale_temps

log = logging.getLogger("normlab")

LOCK_FILE = ".run.lock"
METRICS_FILE = "metrics.jsonl"
# OSErrors that mean "the disk", not a bug: full, over quota, read-only, gone
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}


def disk_error(exc: OSError) -> UserError:
    where = f" {exc.filename}" if exc.filename else ""
    return UserError(
        f"Could not write{where} ({exc.strerror or exc}); free some space or point hydra.run.dir at a disk with "
        "room and write access — everything written before is intact."
    )


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


class RunDirectory:
    """`acquire` checks that `path` is writable, takes its lock (one run at a time) and removes stale
    temporary files in it and in `subdirs`; `release` lets the next run in."""

    def __init__(self, path: Path, subdirs: tuple[str, ...] = ()) -> None:
        self.path, self.subdirs = path, subdirs
        self._lock: FileLock | None = None

    def acquire(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write_test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(
                f"Cannot write to the run directory {self.path} ({e.strerror}); "
                "point hydra.run.dir (or hydra.sweep.dir) at a writable place."
            ) from None
        lock = FileLock(str(self.path / LOCK_FILE))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise UserError(
                f"Another run is using {self.path} right now (it holds {LOCK_FILE}); wait for it to end, or "
                "point hydra.run.dir somewhere else."
            ) from None
        self._lock = lock
        for d in (self.path, *(self.path / s for s in self.subdirs)):
            for p in remove_stale_temps(d):
                log.info("removed %s, left by a write that was cut short", p)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
