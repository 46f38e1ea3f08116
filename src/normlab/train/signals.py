"""Stopping on a signal without losing anything: the handler records the request, the loop acts on it.

SIGTERM (schedulers, `timeout`, `docker stop`), SIGINT (Ctrl-C) and SIGUSR1 (SLURM's warning before a
time limit, with `--signal=USR1@SECONDS`) all go to one handler, `StopRequest.handle`, which only records
*that* a stop was asked for and by which signal. The training loop polls the request (`stop()`) at each step
boundary; the run then decides *how to react* from `StopRequest.reaction` — today every signal means
`Reaction.STOP` (flush metrics, write checkpoints/last.pt and summary.json, exit 128 + signal number), and a
later reaction (e.g. requeue on SIGUSR1) is a new entry in `reactions`, not a second handler. Keeping the
request a plain flag also lets distributed ranks agree on one stop step: a wrapper can all-reduce the flag
at a boundary and every rank stops after the same step.

Where no step boundary is coming (building the data, the model), waiting makes no sense: outside
`deferred()` the first signal raises `Interrupted` at once, the way Ctrl-C raises KeyboardInterrupt. Inside
it (the loop and the final save) a second signal is acknowledged and ignored, so it cannot cut a checkpoint
or summary in half; a third one raises `Interrupted` anyway, for a user who really wants out (files are
written atomically, so even then nothing is left half-written).

Once the run's final summary.json is written (`settle`), its ending is decided: a signal after that — while
the sample is written, W&B finishes, the process exits — is acknowledged and ignored, so a completed run
stays completed, exits 0 and keeps its sample. A single run keeps that handler until its command ends
(`installed(keep_when_settled=True)`), not only until `Run.execute` returns; the command then says and
ignores every stop signal until its process has exited (`ignored_from_now`), a sweep's as a run's.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
FORCE_AFTER = 3  # the signal count at which a deferred stop gives up waiting


class Reaction(enum.Enum):
    """What a run does once a stop request reaches a step boundary."""

    STOP = "stop"  # save everything, write status interrupted, exit 128 + signal number
    # save everything as STOP does, then hand the signal back to the cluster launcher that was waiting for
    # it (submitit: its handler requeues the job, and the requeued job resumes the run; normlab.requeue)
    REQUEUE = "requeue"


DEFAULT_REACTIONS: Mapping[int, Reaction] = {s: Reaction.STOP for s in STOP_SIGNALS}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (SIGINT 130, SIGTERM 143)."""
    return 128 + signum


class Interrupted(BaseException):
    """A stop that could not wait for a step boundary (like KeyboardInterrupt, not an Exception)."""

    def __init__(self, signum: int, forced: bool = False) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum
        self.forced = forced


def _say(message: str) -> None:
    # os.write, not print: a handler may run in the middle of another write to stderr, and Python's
    # buffered streams refuse re-entrant writes
    with contextlib.suppress(OSError):
        os.write(2, (message + "\n").encode())


class StopRequest:
    """Records the first stop signal; calling the request (`stop()`) is the loop's poll at a step boundary."""

    def __init__(self, reactions: Mapping[int, Reaction] = DEFAULT_REACTIONS) -> None:
        self.reactions = dict(reactions)
        self.signum: int | None = None
        self.count = 0
        self._deferring = 0
        self.settled: str | None = None  # the run's final status, once summary.json says it

    def __call__(self) -> bool:
        return self.signum is not None

    @property
    def reaction(self) -> Reaction | None:
        return None if self.signum is None else self.reactions.get(self.signum, Reaction.STOP)

    @property
    def signal_name(self) -> str | None:
        return None if self.signum is None else signal_name(self.signum)

    def request(self, signum: int) -> None:
        """Record a stop request as the handler does (for tests and for code that decides to stop)."""
        self.count += 1
        if self.signum is None:
            self.signum = signum

    def settle(self, status: str) -> None:
        """The run's final summary.json is written with `status`: from now on signals change nothing."""
        self.settled = status

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        if self.settled is not None:
            _say(f"{signal_name(signum)} received after the run ended ({self.settled}): nothing to stop")
            return
        self.request(signum)
        if not self._deferring:
            raise Interrupted(signum)
        name = signal_name(signum)
        if self.count == 1:
            _say(
                f"{name} received: stopping after the current step and saving (a third signal stops without saving)"
            )
        elif self.count < FORCE_AFTER:
            _say(f"{name} received again: already stopping, saving the checkpoint and summary")
        else:
            raise Interrupted(signum, forced=True)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within this block a signal only sets the request (the loop polls it); nestable."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    @contextlib.contextmanager
    def installed(
        self, signals: tuple[int, ...] | None = None, keep_when_settled: bool = False
    ) -> Iterator[StopRequest]:
        """Route `signals` (default: every signal this request has a reaction for) to this request for the
        duration; previous handlers come back afterwards — unless `keep_when_settled` and the run has
        settled, when this request's handler stays (the caller restores handlers when it ends).

        Only the main thread can install handlers: elsewhere (a run started from a worker thread) this does
        nothing and signals keep their previous meaning.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        if signals is None:
            signals = tuple(self.reactions)
        previous = {s: signal.getsignal(s) for s in signals}
        for s in signals:
            signal.signal(s, self.handle)
        try:
            yield self
        finally:
            if not (keep_when_settled and self.settled is not None):
                for s, handler in previous.items():
                    signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def ignored_from_now(what: str = "run") -> None:
    """From now until the process exits, a stop signal is said and ignored: the command's `what` (run or
    sweep) has ended and saved what it had, so a signal while the process winds down (Hydra finishing, the
    interpreter exiting: about a second) changes neither its files nor its exit code, and a Ctrl-C pressed
    twice never ends in a traceback. A no-op off the main thread."""

    def handle(signum: int, frame: FrameType | None) -> None:
        _say(f"{signal_name(signum)} received after the {what} ended: nothing to stop")

    handle.after_the_end = True  # type: ignore[attr-defined]
    if threading.current_thread() is not threading.main_thread():
        return
    for s in STOP_SIGNALS:
        signal.signal(s, handle)


def _ignore_while_exiting() -> None:
    """At the interpreter's exit (the last atexit call: registered when this module is first imported),
    after the command ended: the interpreter puts a Python handler back to the default — which would kill
    the process — once Python code stops running, but leaves an ignored signal ignored. From then on the
    stop signals are ignored without a word."""
    if threading.current_thread() is not threading.main_thread():
        return
    if all(getattr(signal.getsignal(s), "after_the_end", False) for s in STOP_SIGNALS):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


atexit.register(_ignore_while_exiting)  # first registered, last called


@contextlib.contextmanager
def handlers_restored(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """The handlers of `signals` as they are now come back when the block ends, whatever it installed."""
    previous = {s: signal.getsignal(s) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
