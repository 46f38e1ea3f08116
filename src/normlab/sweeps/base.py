"""What every normlab launcher does around its jobs, whichever way it runs them.

Before: number the jobs; where the sweep directory already holds runs (the same `-m` command run again
with `train.resume=auto`), give each job its directory, say in one line per job what happens to it, and
skip the ones that finished (normlab.sweeps.jobs). A job whose directory a live process holds refuses the
whole sweep before anything starts.

After: one line per job and the command that continues the sweep (normlab.sweeps.ending), and the sweep's
exit code — raised as SystemExit, so that Hydra's sweeper does not turn a job's recorded ending into a
traceback.

Subclasses run the jobs (`run_jobs`) and say whether a signal stopped the sweep (`stopped_by`).
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from normlab.commands import sweep_command
from normlab.job import JobFailed
from normlab.sweep_progress import mark_done
from normlab.sweeps.ending import job_ending, report_end
from normlab.sweeps.jobs import Job, SweepJobs, plan_jobs, summary_of
from normlab.sweeps.results import clear_dead_results
from normlab.sweeps.stop import say
from normlab.train.run_dir import RESUME, START

log = logging.getLogger(__name__)

EXIT_BUSY = 2


@dataclass
class Ran:
    """What a launcher knows of one job it handled: Hydra's JobReturn (None if the job's process died
    without answering or the job never got going), whether it was launched, and a dead process's status."""

    ret: JobReturn | None
    launched: bool = True
    died: int | None = None


class SweepLauncher(Launcher):
    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self.stopped_by: int | None = None  # the signal that stopped the sweep, if one did
        self.sweep_jobs: list[Job] = []  # every job of this invocation, skipped ones included

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def run_jobs(self, jobs: Sequence[Job]) -> dict[int, Ran]:
        """Run `jobs` (none of them skipped); return what happened to each, by job number."""
        raise NotImplementedError

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep = plan_jobs(self.hydra_context, self.config, job_overrides, initial_job_idx)
        sweep.sweep_dir.mkdir(parents=True, exist_ok=True)
        for folder in clear_dead_results(sweep.sweep_dir):
            log.info("removed %s, left by a sweep whose process was killed", folder)
        self._announce(sweep)
        to_run = [j for j in sweep.jobs if not j.skipped]
        self.sweep_jobs = sweep.jobs  # every job, run now or finished before (the stacked launcher's stacks)
        mark_done(sweep.sweep_dir, [j.num for j in sweep.jobs if j.skipped])
        ran = self.run_jobs(to_run) if to_run else {}
        endings = [
            job_ending(j, r.ret, r.launched, r.died)
            for j in sweep.jobs
            for r in [ran.get(j.num, Ran(None, launched=False))]
        ]
        code = report_end(endings, sweep.sweep_dir, self.stopped_by, sweep_command(self.config))
        if code:
            raise SystemExit(code)
        returns = [ran[j.num].ret if j.num in ran else None for j in sweep.jobs]
        return [r if r is not None else finished_return(j) for j, r in zip(sweep.jobs, returns, strict=True)]

    def _announce(self, sweep: SweepJobs) -> None:
        log.info("Launching %d jobs, sweep output dir: %s", len(sweep.jobs), sweep.sweep_dir)
        for job in sweep.jobs:  # the overrides as typed: not the name= that carries them (sweeps.names)
            shown = [o for o in job.overrides if not (o.startswith("name=") and "${" in o)]
            log.info("\t#%d : %s", job.num, " ".join(filter_overrides(shown)))
        if sweep.busy:
            job = sweep.busy[0]
            say(
                f"error: job #{job.num} ({job.label}) is being run right now by another process in {job.run_dir} "
                "(it holds .run.lock); wait for that process to end or stop it, then run this command again."
            )
            raise SystemExit(EXIT_BUSY)
        if not sweep.resumed:
            return
        counts = {
            a: sum(1 for j in sweep.jobs if j.plan and j.plan.action == a) for a in ("skip", RESUME, START)
        }
        say(
            f"[sweep] continuing {sweep.sweep_dir}: {counts['skip']} finished (skipped), {counts[RESUME]} to "
            f"resume, {counts[START]} to start"
        )
        for job in sweep.jobs:
            assert job.plan is not None
            say(f"  #{job.num} {job.label} — {job.plan.sentence}")
        sys.stderr.flush()


def print_crash(ret: JobReturn | None) -> None:
    """A crashed job's traceback on stderr, as a single run prints it (a failed one said its sentence)."""
    if ret is None or ret.status != JobStatus.FAILED:
        return
    if not isinstance(ret._return_value, JobFailed):
        traceback.print_exception(ret._return_value)


def finished_return(job: Job) -> JobReturn:
    """A JobReturn for a job that finished in an earlier invocation (the sweeper reads its value)."""
    summary = summary_of(job.run_dir) or {}
    ret = JobReturn(overrides=job.overrides, status=JobStatus.COMPLETED)
    ret.return_value = summary.get("final_val_loss")
    return ret
