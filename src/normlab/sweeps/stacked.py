"""`hydra/launcher=stacked`: a sweep's runs that share one compute graph trained together, as one stacked model.

    python train.py -m seed=0,1,2,3 optim.lr=1e-3,3e-3 model=tiny data=synthetic hydra/launcher=stacked

The launcher composes every job's config and groups the jobs whose configs agree on everything but the
keys a member of a stack may have of its own (`MEMBER_KEYS`: seed and so data order, learning rate and
its floor, warm-up, schedule, weight decay, betas, eps, z-loss, gradient clipping, spikes, divergence,
logger, name), and that resume from the same step. Each group of at most `max_stack` jobs — and no more
than fit in memory together (normlab.train.memory) — is trained by one process as one stacked model
(normlab.train.stacked); a job that cannot share its graph with another (or cannot be stacked: fp16, an
invalid config) runs alone, exactly as under `hydra/launcher=joblib`. `n_jobs` processes run at once.

Everything else is the local pool's (normlab.sweeps.pool) and every launcher's (normlab.sweeps.base):
each job keeps its own run directory, matched by its overrides when the sweep is continued with
`train.resume=auto`; a signal stops every running stack at its next step boundary with every member saved;
the sweep's report lists each job.

In the group's process each member goes through Hydra's own job set-up (`run_job`: its directory,
`.hydra/`, its callbacks) — the members' set-ups nested one in another, the innermost training the stack —
so that a member's directory holds what a run alone's does. Its `train.log` holds the stack's log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, run_job
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from normlab import requeue
from normlab.errors import UserError
from normlab.job import JobFailed, command_to_resume, crash_recorded, job_outcome, sweep_group
from normlab.sweeps.jobs import Job, _hydra_config_kept, job_config
from normlab.sweeps.pool import LocalPoolLauncher

log = logging.getLogger(__name__)

DEFAULT_MAX_STACK = 32
N_JOBS_OVERRIDE = "hydra.launcher.n_jobs="  # the resolved n_jobs, handed to every job with its overrides
# what the members of a stack may each have of their own: top-level keys, whole groups, and group.key
MEMBER_KEYS = (
    "seed",
    "name",
    "experiment_name",
    "warmup_steps",
    "schedule",
    "optim.lr",
    "optim.min_lr",
    "optim.weight_decay",
    "optim.betas",
    "optim.eps",
    "optim.z_loss",
    "train.grad_clip",
    "train.resume",
    "train.sample_tokens",
    "train.sample_prompt",
    "train.progress",
    "spikes",
    "divergence",
    "logger",
)
# what cannot be stacked at all (a run of its own): fp16's gradient scaler is one scale for the whole model
SINGLE_ONLY = {"train.precision": ("fp16",)}


def graph_key(cfg: Mapping[str, Any]) -> str | None:
    """What a job must share with the other members of its stack: its resolved config without MEMBER_KEYS,
    as one string; None for a job that runs alone (SINGLE_ONLY, or a config that does not check)."""
    from normlab.config import checked

    try:
        resolved = checked(cfg)
    except Exception:  # invalid: its own run records it (status invalid) in one sentence
        return None
    for key, values in SINGLE_ONLY.items():
        group, _, name = key.partition(".")
        if resolved.get(group, {}).get(name) in values:
            return None
    shared = json.loads(json.dumps(resolved, default=str))
    for key in MEMBER_KEYS:
        group, _, name = key.partition(".")
        if not name:
            shared.pop(group, None)
        elif isinstance(shared.get(group), dict):
            shared[group].pop(name, None)
    return json.dumps(shared, sort_keys=True)


def stack_groups(
    keys: Sequence[str | None], max_stack: int, fits: Sequence[int] | None = None, processes: int = 1
) -> list[list[int]]:
    """Indices of jobs grouped by equal keys (None: alone), in order, each group cut into stacks of at most
    `max_stack` (and at most `fits[i]` for a group starting with job i: what memory holds), and into at
    least `processes` stacks where it has the jobs for them (so that every process at once has work)."""
    groups: dict[str, list[int]] = {}
    units: list[list[int]] = []
    for i, key in enumerate(keys):
        if key is None:
            units.append([i])
        else:
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        size = max(1, min(max_stack, fits[members[0]] if fits is not None else max_stack))
        size = min(size, max(1, math.ceil(len(members) / max(1, processes))))
        units += [members[j : j + size] for j in range(0, len(members), size)]
    return sorted(units, key=lambda unit: unit[0])


class StackedLauncher(LocalPoolLauncher):
    """`max_stack` runs at most in one model; `n_jobs` stacks (processes) at once: `auto` is one per core
    when the jobs train on the CPU (each stack on one thread), one on a GPU (a process owns the device)."""

    def __init__(self, max_stack: int = DEFAULT_MAX_STACK, n_jobs: int | str = "auto") -> None:
        super().__init__(n_jobs=1)
        self.requested_jobs = n_jobs
        self.max_stack = max(1, int(max_stack))

    def units(self, jobs: Sequence[Job]) -> list[list[Job]]:
        """The stacks: `jobs` (those to run now) in the stacks the whole sweep makes when it starts afresh
        (`stack_groups` over every job of the sweep, the finished ones included), each stack cut where its
        jobs resume from different steps. So a sweep continued after a signal trains the stacks it trained
        before — the same members together, whatever step each stack had reached — and continues bit for bit
        (a stack's arithmetic depends on which members it holds); a stack reduced to one job trains stacked
        still (`stacked`)."""
        assert self.config is not None and self.hydra_context is not None
        from normlab.train import memory
        from normlab.train.build import pick_device

        every = self.sweep_jobs or list(jobs)
        keys: list[str | None] = []
        fits: list[int] = []
        devices: set[str] = set()
        with _hydra_config_kept():
            for job in every:
                cfg = job_config(self.hydra_context, self.config, job.overrides, job.num)
                HydraConfig.instance().set_config(cfg)
                key = graph_key(_task_config(cfg))
                keys.append(key)
                fit = self.max_stack
                if key is not None:
                    shared = json.loads(key)  # the memory estimate reads the model and train groups only
                    with contextlib.suppress(Exception):  # the run's own check says what is wrong
                        device = pick_device(shared["train"]["device"])
                        devices.add(device.type)
                        fit = memory.stack_fits(shared, device)
                fits.append(fit)
        self.n_jobs = self.processes(devices)
        with read_write(self.config.hydra), open_dict(self.config.hydra):  # what the stacks' processes read
            self.config.hydra.launcher.n_jobs = self.n_jobs
        for job in jobs:  # each job composes its own config: it gets the number, never `auto`
            job.overrides = [o for o in job.overrides if not o.startswith(N_JOBS_OVERRIDE)]
            job.overrides.append(f"{N_JOBS_OVERRIDE}{self.n_jobs}")
        running = {job.num for job in jobs}
        self._stacks: set[tuple[int, ...]] = set()
        units: list[list[Job]] = []
        for group in stack_groups(keys, self.max_stack, fits, processes=self.n_jobs):
            by_step: dict[int, list[Job]] = {}
            for i in group:
                job = every[i]
                if job.num in running:
                    start = job.plan.step if job.plan is not None and job.plan.step is not None else 0
                    by_step.setdefault(start, []).append(job)
            for unit in by_step.values():
                units.append(unit)
                if len(group) > 1:
                    self._stacks.add(tuple(j.num for j in unit))
        units.sort(key=lambda unit: unit[0].num)
        for unit in units:
            if len(unit) > 1:
                log.info("stacked: jobs %s as one model", ", ".join(f"#{j.num}" for j in unit))
        return units

    def stacked(self, unit: Sequence[Job]) -> bool:
        return tuple(j.num for j in unit) in getattr(self, "_stacks", set())

    def processes(self, devices: set[str]) -> int:
        """hydra.launcher.n_jobs as a number: `auto` is the cores on the CPU, 1 where a GPU trains."""
        if str(self.requested_jobs) != "auto":
            return max(1, int(self.requested_jobs))
        if devices and devices <= {"cpu"}:
            return cores()
        return 1


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _task_config(cfg: DictConfig) -> dict[str, Any]:
    """The job's config without Hydra's node, resolved."""
    task = cfg.copy()
    with open_dict(task):
        del task["hydra"]
    container = OmegaConf.to_container(task, resolve=True)
    assert isinstance(container, dict)
    return container


# ----------------------------------------------------------------------------------------------------
# In the group's process: every member's Hydra job set up, then one stack trained
# ----------------------------------------------------------------------------------------------------


@dataclass
class StackedJob:
    """One member as the group's process knows it, set up by Hydra's run_job."""

    num: int
    cfg: DictConfig  # the task's config (no `hydra` node), as Hydra hands a task function
    hydra_cfg: DictConfig  # the job's whole config, Hydra's node included
    run_dir: Path
    overrides: list[str]  # the job's task overrides (its resume command repeats them)
    wandb_group: str | None = None

    @contextlib.contextmanager
    def as_job(self) -> Iterator[None]:
        """This member's Hydra config as the current job's, for the duration."""
        with _hydra_config_kept():
            HydraConfig.instance().set_config(self.hydra_cfg)
            yield


def run_group(
    context: HydraContext, config: DictConfig, jobs: Sequence[tuple[int, list[str]]]
) -> dict[int, JobReturn | None]:
    """Set each job up as Hydra's launchers do (its directory, `.hydra/`, callbacks: `run_job`), nested, and
    train them as one stack in the innermost; returns each job's JobReturn."""
    members: list[StackedJob] = []
    outcomes: dict[int, Any] = {}
    returns: dict[int, JobReturn | None] = {}
    log_files: list[Path] = []

    def level(k: int) -> None:
        if k == len(jobs):
            with _also_logged_to(log_files[:-1]):
                threads = threads_per_stack(int(OmegaConf.select(config, "hydra.launcher.n_jobs") or 1))
                for member, value in zip(
                    members, run_stacked_jobs(members, threads, own_process=True), strict=True
                ):
                    outcomes[member.num] = value
            return
        num, overrides = jobs[k]
        cfg = job_config(context, config, overrides, num)

        def task(task_cfg: DictConfig) -> Any:
            hydra_cfg = HydraConfig.get()
            run_dir = Path(hydra_cfg.runtime.output_dir)
            members.append(
                StackedJob(
                    num,
                    task_cfg,
                    cfg,  # run_job has set its output directory in it
                    run_dir,
                    list(hydra_cfg.overrides.task),
                    wandb_group=sweep_group(),
                )
            )
            log_files.append(run_dir / f"{hydra_cfg.job.name}.log")
            level(k + 1)
            value = outcomes.get(num)
            if isinstance(value, BaseException):
                raise value
            return value

        returns[num] = run_job(
            hydra_context=context,
            task_function=task,
            config=cfg,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )

    level(0)
    return returns


def run_stacked_jobs(
    jobs: Sequence[StackedJob], threads: int | None = None, own_process: bool = False
) -> list[Any]:
    """Run the jobs of a stacked group as one stack; returns, per job, what a job alone would return for it
    (normlab.job.job_outcome), or the exception it would raise. `own_process`: the stack is all its
    process runs (a sweep's worker), so a signal after every member ended is said and ignored until the
    process exits instead of abandoning the jobs' answers."""
    from normlab.train.stacked.run import MemberRun, StackedRun

    try:
        stop = requeue.stop_request()
        members = [
            MemberRun(
                job.cfg,
                job.run_dir,
                group=job.wandb_group,
                stop=stop,
                resume_command=lambda run_dir, resume, o=job.overrides: command_to_resume(o, run_dir, resume),
                as_job=job.as_job,
                side_by_side=True,  # several runs in one process: progress lines, no bars
            )
            for job in jobs
        ]
        requested = jobs[0].cfg.train.num_threads
        summaries = StackedRun(
            members, stop, requested if isinstance(requested, int) else threads, keep_signals=own_process
        ).execute()
    except Exception as e:  # a bug before the members' runs could record it: each job's summary says so
        for job in jobs:
            with contextlib.suppress(Exception), crash_recorded(job.cfg, job.run_dir):
                raise e
        e.normlab_crash = True  # type: ignore[attr-defined]
        return [e for _ in jobs]
    outcomes: list[Any] = []
    for member, summary in zip(members, summaries, strict=True):
        if summary is None or member.error is not None:
            error = member.error or UserError("the run directory could not be used")
            if not isinstance(error, UserError):
                error.normlab_crash = True  # type: ignore[attr-defined]
            else:
                print(f"error: {error}", file=sys.stderr)
                error = JobFailed(str(error))
            outcomes.append(error)
            continue
        try:
            outcomes.append(job_outcome(summary, member.run_dir, multirun=True))
        except JobFailed as e:
            outcomes.append(e)
    return outcomes


@contextlib.contextmanager
def _also_logged_to(paths: Sequence[Path]) -> Iterator[None]:
    """Copy the log (Hydra sends it to the innermost member's train.log) to the other members' logs too."""
    root = logging.getLogger()
    model = next((h for h in root.handlers if isinstance(h, logging.FileHandler)), None)
    handlers = []
    for path in paths:
        handler = logging.FileHandler(path, mode="a")
        if model is not None:
            handler.setFormatter(model.formatter)
            handler.setLevel(model.level)
        root.addHandler(handler)
        handlers.append(handler)
    try:
        yield
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def threads_per_stack(n_jobs: int) -> int:
    """torch threads for each of `n_jobs` stacks running at once: the cores shared out."""
    return max(1, cores() // max(1, n_jobs))
