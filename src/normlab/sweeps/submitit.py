"""`hydra/launcher=submitit_local` and `hydra/launcher=slurm`: Hydra's submitit launchers with normlab's
planning, report and exit code (normlab.sweeps.base), and, for local jobs, the signal handling of a local
sweep (normlab.sweeps.stop).

A local submitit job is a controller process (`python -m submitit.local._local`) running the job as its
child. Left in the sweep's process group, the controller answers Ctrl-C by killing its job a second later,
saved or not, and outlives the sweep's parent. So the controllers are started in sessions of their own
(`isolated_sessions`: submitit starts them with a plain `subprocess.Popen`, which gets start_new_session),
each job writes its pid where the parent finds it, the parent passes every signal it gets on to those
pids, and each job watches the parent (normlab.sweeps.watchdog).

SLURM jobs run on other machines under SLURM's signals (preemption and requeueing: normlab.requeue); the
sweep's parent only submits, waits and reports, and a signal to it leaves the jobs running, as `scancel`
is the way to stop them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import time
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf

from normlab.sweeps import watchdog
from normlab.sweeps.base import Ran, SweepLauncher
from normlab.sweeps.jobs import Job
from normlab.sweeps.stop import SweepStop, send

log = logging.getLogger(__name__)

POLL_S = 0.2


@contextlib.contextmanager
def isolated_sessions() -> Iterator[None]:
    """While submitit starts local controllers, start each in a session of its own (see the module doc)."""
    import submitit.local.local as local

    real = local.subprocess
    shim = types.SimpleNamespace(**vars(subprocess))
    shim.Popen = functools.partial(subprocess.Popen, start_new_session=True)
    local.subprocess = shim  # type: ignore[assignment]
    try:
        yield
    finally:
        local.subprocess = real


class _SubmititSweep(SweepLauncher):
    """The submission and collection shared by the local and SLURM launchers (`_EXECUTOR` says which)."""

    _EXECUTOR = "abstract"
    pid_dir: Path | None = None  # local: where each job writes its pid for the parent
    parent: tuple[int, str | None] | None = None  # local: the parent the jobs watch

    def _executor(self) -> Any:
        import submitit

        assert self.config is not None
        params: dict[str, Any] = dict(self.params)  # type: ignore[attr-defined]
        init = {"folder": params.pop("submitit_folder")}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{k if k in shared else f"{self._EXECUTOR}_{k}": v for k, v in params.items()}
        )
        return executor

    def _submit(self, jobs: Sequence[Job]) -> list[Any]:
        executor = self._executor()
        args = [
            (j.overrides, "hydra.sweep.dir", j.num, f"job_id_for_{j.num}", Singleton.get_state())
            for j in jobs
        ]
        return list(executor.map_array(self, *zip(*args, strict=True)))

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        """Runs in the job's process: register for the parent's signals and watch it, then the job."""
        registered = None
        if self.pid_dir is not None:
            registered = self.pid_dir / str(os.getpid())
            registered.write_text(watchdog.start_time(os.getpid()) or "")
        if self.parent is not None:
            watchdog.watch(*self.parent)
        try:
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        finally:
            if registered is not None:
                registered.unlink(missing_ok=True)

    def _wait(self, submitted: Sequence[Any], jobs: Sequence[Job]) -> dict[int, Ran]:
        while not all(s.done() for s in submitted):
            time.sleep(POLL_S)
        ran = {}
        for job, s in zip(jobs, submitted, strict=True):
            try:
                ran[job.num] = Ran(s.results()[0])
            except Exception as e:  # its process died (killed, out of memory) before answering
                log.debug("job %d: %s", job.num, e)
                ran[job.num] = Ran(None)
        return ran


def registered(pid_dir: Path) -> list[int]:
    """The local jobs running now: the pids they wrote, each still the process that wrote it."""
    pids = []
    for p in list(pid_dir.iterdir()):
        with contextlib.suppress(OSError, ValueError):
            started = p.read_text() or None
            if watchdog.alive(int(p.name), started):
                pids.append(int(p.name))
    return pids


class SubmititLocalLauncher(_SubmititSweep, submitit_launcher.LocalLauncher):
    _EXECUTOR = "local"

    def __init__(self, **params: Any) -> None:
        submitit_launcher.LocalLauncher.__init__(self, **params)
        self.stopped_by = None

    def run_jobs(self, jobs: Sequence[Job]) -> dict[int, Ran]:
        self.pid_dir = Path(tempfile.mkdtemp(prefix="normlab-sweep-"))
        self.parent = (os.getpid(), watchdog.start_time(os.getpid()))
        pid_dir = self.pid_dir
        stop = SweepStop(lambda signum: sum(send(pid, signum) for pid in registered(pid_dir)))
        try:
            with stop.installed():
                with isolated_sessions():
                    submitted = self._submit(jobs)
                ran = self._wait(submitted, jobs)
        finally:
            shutil.rmtree(pid_dir, ignore_errors=True)
        self.stopped_by = stop.signum
        return ran


class SubmititSlurmLauncher(_SubmititSweep, submitit_launcher.SlurmLauncher):
    _EXECUTOR = "slurm"

    def __init__(self, **params: Any) -> None:
        submitit_launcher.SlurmLauncher.__init__(self, **params)
        self.stopped_by = None

    def run_jobs(self, jobs: Sequence[Job]) -> dict[int, Ran]:
        return self._wait(self._submit(jobs), jobs)
