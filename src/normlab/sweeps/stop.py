"""A signal to a sweep's parent process: no job starts after it, and every running job gets it exactly once.

The jobs of a local multi-process sweep run in their own sessions (process groups), so a signal sent to the
sweep's group (Ctrl-C in a terminal, `kill -TERM -PGID`) reaches only the parent, exactly as one sent to the
parent alone. The parent passes each signal it gets on to every running job: a job therefore hears Ctrl-C
once per press whichever way it was sent, and reacts as a single run does (normlab.train.signals): the
first stops it at its next step boundary with everything saved, a second is acknowledged, a third stops it
without saving. A job that ends by itself after the signal still ends normally; no new job is launched.

If the parent dies without passing anything on (SIGKILL, a closed terminal's SIGHUP), each job notices
within a second (normlab.sweeps.watchdog) and stops as if it had been sent SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

from normlab.train.signals import STOP_SIGNALS, signal_name


def say(message: str) -> None:
    # os.write, not print: a handler may run in the middle of another write to stderr
    with contextlib.suppress(OSError):
        os.write(2, (message + "\n").encode())


class SweepStop:
    """The parent's stop request. `forward(signum)` passes a signal on to the running jobs and returns how
    many it reached; `handle` is the signal handler."""

    def __init__(self, forward: Callable[[int], int] = lambda signum: 0) -> None:
        self.forward = forward
        self.signum: int | None = None
        self.count = 0

    def __call__(self) -> bool:
        return self.signum is not None

    @property
    def signal_name(self) -> str | None:
        return None if self.signum is None else signal_name(self.signum)

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        reached = self.forward(signum)
        name = signal_name(signum)
        if self.count == 1:
            say(
                f"{name} received: no new job starts; {reached} running job(s) stop after their current step "
                "and save"
            )
        else:
            say(f"{name} received again: passed on to {reached} running job(s)")

    @contextlib.contextmanager
    def installed(
        self,
        handler: Callable[[int, FrameType | None], None] | None = None,
        signals: tuple[int, ...] = STOP_SIGNALS,
    ) -> Iterator[SweepStop]:
        """Route `signals` to `handler` (default: this request's) for the duration (main thread only); the
        earlier handlers come back after."""
        previous = {s: signal.getsignal(s) for s in signals}
        for s in signals:
            signal.signal(s, handler or self.handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def send(pid: int, signum: int) -> bool:
    """Send `signum` to `pid`; False if the process is already gone."""
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True
