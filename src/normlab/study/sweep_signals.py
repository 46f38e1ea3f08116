"""The stop signals (Ctrl-C, SIGTERM) of scripts/reproduce.py, passed on to the running sweep once
(`Forward`), and the exception that ends the run of findings when one came (`Stopped`).

Its own module because the sweep runs in a session of its own: a signal reaches it only through here, and
both the preset's sweep and the loop over findings ask whether one came.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Exception):
    """A signal stopped a preset's sweep (which saved its running jobs): nothing further is started."""

    def __init__(self, signum: int, finding: str) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.finding = signum, finding


class Forward:
    """Passes each stop signal this process gets on to the running sweep, once: the sweep runs in a session
    of its own, so a Ctrl-C in the terminal reaches it only through here (as a sweep passes it to its jobs)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.process: subprocess.Popen | None = None

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signum)
        if first:
            name = signal.Signals(signum).name
            print(
                f"{name} received: the running sweep saves its jobs and stops; no further finding starts",
                file=sys.stderr,
                flush=True,
            )

    @contextlib.contextmanager
    def installed(self) -> Iterator[Forward]:
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in STOP_SIGNALS:
            signal.signal(s, self.handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
