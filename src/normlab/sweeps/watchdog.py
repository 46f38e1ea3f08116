"""A job process that outlives its sweep's parent stops itself: it saves and exits within a step or so.

A local sweep's jobs run in their own sessions, so nothing reaches them when the parent is killed with
SIGKILL or loses its terminal. A daemon thread in each job checks once a second that the parent is still
there and, once it is not, sends the job SIGTERM: the run then stops at its next step boundary and saves
`checkpoints/last.pt` and `summary.json` (interrupted) like any signalled run, and the job exits instead of
training on with nobody waiting for it.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

POLL_S = 1.0


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc on Linux), to tell it from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def alive(pid: int, started: str | None) -> bool:
    """Whether `pid` is still the process that started at `started` (and not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and (started is None or fields[19] == started)


def watch(parent: int, started: str | None, poll_s: float = POLL_S) -> threading.Thread:
    """Send this process SIGTERM once `parent` (whose start time is `started`) has gone; a daemon thread."""

    def run() -> None:
        stop = threading.Event()
        while not stop.wait(poll_s):
            if not alive(parent, started):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=run, name="normlab-parent-watchdog", daemon=True)
    thread.start()
    return thread
