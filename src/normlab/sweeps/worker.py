"""`python -m normlab.sweeps.worker RESULT_FILE PARENT_PID`: one job of a local-pool sweep (normlab.sweeps.pool),
or one stack of jobs (normlab.sweeps.stacked).

Reads the pickled jobs from stdin — Hydra's context, the sweep's config, the task function, Hydra's global
state, each job's number and overrides, whether they are a stack — runs one job as Hydra's launchers do, or
a stack of them (one job or several) as one stacked model, and
writes their JobReturns to RESULT_FILE, by job number (atomically; None for a job a signal stopped before
it began) — unless the parent is gone by then (SIGKILL): nobody would read it, so the process removes the
results folder instead. The process starts with the stop signals blocked (the parent blocks them while
starting it): they wait until a stop request is installed, and until the run installs its own, a signal
abandons the job before it has begun training.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, run_job, setup_globals

from normlab.io import write_bytes_atomic
from normlab.sweeps import watchdog
from normlab.sweeps.base import print_crash
from normlab.sweeps.jobs import job_config
from normlab.train.signals import STOP_SIGNALS, Interrupted, StopRequest


def decode(payload: bytes) -> tuple[Any, Any, Any, Any, list[tuple[int, list[str]]], bool]:
    """The pickled jobs: Hydra's context, the sweep's config, the task function (unpickling it imports its
    module: train.py's is normlab.cli's), Hydra's global state, the jobs, whether they are a stack."""
    common, jobs, stacked = cloudpickle.loads(payload)
    context, config, task_function, singletons = cloudpickle.loads(common)
    return context, config, task_function, singletons, jobs, stacked


def run(decoded: tuple[Any, Any, Any, Any, list[tuple[int, list[str]]], bool]) -> dict[int, JobReturn | None]:
    context, config, task_function, singletons, jobs, stacked = decoded
    setup_globals()
    Singleton.set_state(singletons)
    if stacked:
        from normlab.sweeps.stacked import run_group

        return run_group(context, config, jobs)
    num, overrides = jobs[0]
    return {num: run_one(context, config, task_function, num, overrides)}


def run_one(context: Any, config: Any, task_function: Any, num: int, overrides: list[str]) -> JobReturn:
    cfg = job_config(context, config, overrides, num)
    HydraConfig.instance().set_config(cfg)
    return run_job(
        hydra_context=context,
        task_function=task_function,
        config=cfg,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def picklable(returns: dict[int, JobReturn | None]) -> bytes:
    """The JobReturns as bytes; an exception that does not pickle travels as its text."""
    try:
        return cloudpickle.dumps(returns)
    except Exception:
        for ret in returns.values():
            if ret is not None:
                ret.return_value = RuntimeError(f"{type(ret._return_value).__name__}: {ret._return_value}")
        return cloudpickle.dumps(returns)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    result, parent = Path(argv[1]), int(argv[2])
    payload = sys.stdin.buffer.read()
    # everything the job imports, while the stop signals are still blocked: a signal that interrupted an
    # import half-way would leave a module half-initialised (a pending one is delivered below, cleanly)
    import normlab.sweeps.stacked  # noqa: F401
    import normlab.train.run  # noqa: F401
    import normlab.train.stacked.run  # noqa: F401

    decoded = decode(payload) if payload else None  # imports the task function's module (normlab.cli)
    if os.getppid() != parent or decoded is None:  # the sweep's parent is gone already: nothing to run
        return
    ret: dict[int, JobReturn | None] = {}
    parent_started = watchdog.start_time(parent)
    with StopRequest().installed():  # a signal before the run takes over: abandon the job (Interrupted)
        watchdog.watch(parent, parent_started)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            ret = run(decoded)
        except (Interrupted, KeyboardInterrupt):
            ret = {}
    for s in STOP_SIGNALS:  # the job is over: a late signal must not cut the result short
        signal.signal(s, signal.SIG_IGN)
    for one in ret.values():
        print_crash(one)
    answer(result, picklable(ret), parent, parent_started)


def answer(result: Path, payload: bytes, parent: int, parent_started: str | None) -> None:
    """Hand the jobs' returns to the parent through `result`; if the parent is gone, remove the results
    folder instead (the other orphaned jobs do the same; whichever comes last leaves nothing behind)."""
    if watchdog.alive(parent, parent_started):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile by a job that saw the parent die
            write_bytes_atomic(result, payload)
            return
    shutil.rmtree(result.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
