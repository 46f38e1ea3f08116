"""`hydra/launcher=joblib`: up to `n_jobs` jobs at once, each in a process of its own.

This replaces the joblib plugin's launcher under the same name (so every command keeps working) because a
pool of reused workers cannot keep a sweep's promises: joblib's loky executor kills every worker when one
dies (a SIGKILL, the out-of-memory killer) and when the parent gets Ctrl-C, so the other running jobs are
lost before they can save, and its workers keep running — and starting queued jobs — after the parent is
gone. Here:

- each job is `python -m normlab.sweeps.worker` in its own session: a process that dies takes only its own
  job with it, and a fresh process per job means no state carries over from one job to the next;
- signals reach the jobs only through the parent (normlab.sweeps.stop): once per signal, whether it was
  sent to the parent alone or to its process group, and after the first one no job is launched;
- a job whose parent dies stops and saves by itself (normlab.sweeps.watchdog);
- a job's JobReturn comes back through a file, so a job can finish and save with nobody listening. The
  files go in a folder of the sweep directory named after the parent process (`.results-PID-START-…`):
  the parent removes it when the sweep ends, a job that outlives a killed parent removes it instead of
  answering nobody, and the next invocation into the sweep directory clears any a dead parent left.

Jobs get `train.num_threads` = 1 by default under this launcher (normlab.cli.threads_for_job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
from hydra.core.singleton import Singleton

from normlab.sweeps.base import Ran, SweepLauncher
from normlab.sweeps.jobs import Job
from normlab.sweeps.live import SweepTicker
from normlab.sweeps.results import results_folder
from normlab.sweeps.stop import SweepStop, send
from normlab.train.signals import STOP_SIGNALS

log = logging.getLogger(__name__)

POLL_S = 0.05


def effective_n_jobs(n_jobs: int) -> int:
    """joblib's convention: -1 = every core, -2 = all but one, ...; cores as joblib counts them (cgroup
    CPU quotas and affinity included)."""
    from joblib import cpu_count

    if n_jobs < 0:
        return max(cpu_count() + 1 + n_jobs, 1)
    return max(n_jobs, 1)


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block the stop signals in this thread: a process started meanwhile inherits the mask, so a signal the
    parent passes on before the new job has its handlers waits for them instead of killing it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass
class Running:
    jobs: list[Job]  # one job, or a stack of them (normlab.sweeps.stacked) trained by one process
    process: subprocess.Popen
    result: Path


class LocalPoolLauncher(SweepLauncher):
    def __init__(self, n_jobs: int = -1) -> None:
        super().__init__()
        self.n_jobs = n_jobs

    def units(self, jobs: Sequence[Job]) -> list[list[Job]]:
        """What each process runs: one job each (the stacked launcher makes groups of them)."""
        return [[job] for job in jobs]

    def stacked(self, unit: Sequence[Job]) -> bool:
        """Whether `unit` trains as one stacked model (a group of jobs; the stacked launcher's)."""
        return len(unit) > 1

    def run_jobs(self, jobs: Sequence[Job]) -> dict[int, Ran]:
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        pending = self.units(jobs)  # first: the stacked launcher decides n_jobs there
        n_jobs = effective_n_jobs(int(self.n_jobs))
        log.info(
            "normlab local pool: %d jobs in %d processes, %d at a time",
            len(jobs),
            len(pending),
            n_jobs,
        )
        common = cloudpickle.dumps(
            (self.hydra_context, self.config, self.task_function, Singleton.get_state())
        )
        running: dict[int, Running] = {}
        ran: dict[int, Ran] = {}
        stop = SweepStop(lambda signum: sum(send(r.process.pid, signum) for r in list(running.values())))
        results = results_folder(Path(str(self.config.hydra.sweep.dir)))
        ticker = SweepTicker(
            Path(str(self.config.hydra.sweep.dir)), len(jobs)
        )  # one line for all running jobs
        try:
            with stop.installed():
                while pending or running:
                    while pending and len(running) < n_jobs and not stop():
                        # blocked from the last check until the job is in `running`: a signal then either
                        # came before (no job starts) or reaches it through the forwarding above
                        with signals_blocked():
                            if stop():
                                break
                            unit = pending.pop(0)
                            key = unit[0].num
                            running[key] = self._start(unit, common, results)
                            if stop.signum is not None:
                                # the mask holds in this thread only: a signal another thread took (torch
                                # starts one) runs its handler here, mid-start, before the job was in
                                # `running`; it waits, blocked, in the new process until its handlers are in
                                send(running[key].process.pid, stop.signum)
                    if stop():
                        pending.clear()
                    for key, r in list(running.items()):
                        if r.process.poll() is not None:
                            ran.update(collect(r))
                            del running[key]
                    ticker.tick(
                        {job.num: job for r in running.values() for job in r.jobs},
                        len(ran),
                        stopping=stop.signum is not None,
                    )
                    time.sleep(POLL_S)
        finally:
            shutil.rmtree(results, ignore_errors=True)
        self.stopped_by = stop.signum
        return ran

    def _start(self, unit: list[Job], common: bytes, results: Path) -> Running:
        """Start the process of `unit`; call with the stop signals blocked (see `signals_blocked`)."""
        result = results / f"{unit[0].num}.pkl"
        process = subprocess.Popen(
            [sys.executable, "-m", "normlab.sweeps.worker", str(result), str(os.getpid())],
            stdin=subprocess.PIPE,
            start_new_session=True,  # signals reach it only through this process (normlab.sweeps.stop)
        )
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died at once: collect() says how
            jobs = [(job.num, job.overrides) for job in unit]
            process.stdin.write(cloudpickle.dumps((common, jobs, self.stacked(unit))))
            process.stdin.close()
        return Running(unit, process, result)


def collect(r: Running) -> dict[int, Ran]:
    """The JobReturns a finished worker left, by job number, or what is known of one that died without
    leaving them."""
    try:
        returns = cloudpickle.loads(r.result.read_bytes())
    except (OSError, EOFError, cloudpickle.pickle.UnpicklingError):
        return {job.num: Ran(None, died=r.process.returncode) for job in r.jobs}
    return {job.num: Ran(returns.get(job.num)) for job in r.jobs}
