"""`hydra/launcher=basic` (the default): the jobs one after another, in the sweep's own process.

While a job trains, its run owns the signal handlers (normlab.train.signals): a signal stops it at the next
step boundary with everything saved, and the sweep then starts no further job. Outside a run — between
jobs, or while Hydra sets the next one up — the sweep's handler records the signal and abandons the job
being set up, before it has written anything but Hydra's `.hydra/`.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from types import FrameType

from hydra.core.utils import run_job
from omegaconf import open_dict

from normlab.sweeps.base import Ran, SweepLauncher, print_crash
from normlab.sweeps.ending import run_dir_of
from normlab.sweeps.jobs import Job, summary_of
from normlab.sweeps.stop import SweepStop
from normlab.train.signals import Interrupted


class InProcessLauncher(SweepLauncher):
    def run_jobs(self, jobs: Sequence[Job]) -> dict[int, Ran]:
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        in_job = False
        stop = SweepStop()

        def handle(signum: int, frame: FrameType | None) -> None:
            stop.handle(signum, frame)
            if in_job:  # Hydra is setting a job up (or wrapping one up): abandon it
                raise Interrupted(signum)

        ran: dict[int, Ran] = {}
        with stop.installed(handle):
            for job in jobs:
                if stop():
                    break
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, job.overrides)
                with open_dict(cfg):
                    cfg.hydra.job.id = cfg.hydra.job.num = job.num
                in_job = True
                try:
                    ret = run_job(
                        hydra_context=self.hydra_context,
                        task_function=self.task_function,
                        config=cfg,
                        job_dir_key="hydra.sweep.dir",
                        job_subdir_key="hydra.sweep.subdir",
                    )
                    ran[job.num] = Ran(ret)
                    print_crash(ret)
                except Interrupted:
                    ran[job.num] = Ran(None)
                finally:
                    in_job = False
                summary = summary_of(run_dir_of(job, ran[job.num].ret)) or {}
                if summary.get("status") == "interrupted" and stop.signum is None:
                    stop.signum = int(signal.Signals[summary.get("signal") or "SIGTERM"])
        self.stopped_by = stop.signum
        return ran
