"""The sweep's processes, seen from outside as a user would see them (Linux /proc): a sweep started in a
session of its own (`SweepProcess`), its job processes, when each started, whether one is still alive, and
the environment every process the soak starts gets.

Its own module because every fault and every check of "no job outlived its parent" goes through it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

GRACE_S = 10.0  # how long after the parent a job process may live
WORKER = "normlab.sweeps.worker"
ROOT = Path(__file__).resolve().parents[2]  # the checkout: train.py beside tools/ and src/


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (None if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def now_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def workers(parent: int) -> list[int]:
    """The job processes of a local-pool sweep: the parent's children running the worker module."""
    found = []
    for pid in children(parent):
        try:
            if WORKER in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:
            continue
    return found


def default_signals() -> None:
    """In a process the soak starts, before it runs train.py: SIGINT as a terminal gives it. A soak started
    in the background of a script (`cmd &`) has SIGINT ignored, which its children would inherit, and a
    SIGINT fault would then do nothing until the sweep installs its own handlers."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class SweepProcess:
    """`python train.py -m …` in a session of its own (so that its process group is the sweep alone), with
    its output appended to `log`; remembers every job process it has seen."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=default_signals,
            )
        self.seen: set[int] = set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll_workers(self) -> list[int]:
        found = workers(self.pid)
        self.seen.update(found)
        return found

    def send(self, signum: int, target: str, rng: random.Random) -> int | None:
        """Send the fault; returns the worker's pid for a worker fault (None: parent or group)."""
        if target == "worker":
            running = self.poll_workers()
            if running:
                pid = rng.choice(running)
                os.kill(pid, signum)
                return pid
            target = "parent"  # no job is running at this moment: the parent gets it
        if target == "group":
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)
        return None

    def wait(self, timeout: float, watch_started_after: int | None = None) -> tuple[int | None, list[int]]:
        """Wait for the parent to exit; return its exit code (None on timeout) and the job processes that
        started after `watch_started_after` (clock ticks) meanwhile."""
        late: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in self.poll_workers():
                started = start_ticks(pid)
                if watch_started_after is not None and started is not None and started > watch_started_after:
                    late.add(pid)
            code = self.proc.poll()
            if code is not None:
                return code, sorted(late)
            time.sleep(0.02)
        return None, sorted(late)

    def lingering(self, grace_s: float = GRACE_S) -> list[int]:
        """The job processes still alive `grace_s` after the parent ended (each polled until then)."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in self.seen):
            time.sleep(0.1)
        return sorted(p for p in self.seen if alive(p))


def env() -> dict[str, str]:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": f"{src}:{path}" if path else src}
