"""What train.py does around a Hydra job: threads, the run, its exit code, and errors as one sentence.

Exit codes of `python train.py` (docs/errors.md, "When something goes wrong"):

- 0: completed or diverged (or, with train.resume=auto, already completed);
- 2: invalid (a bad config value or combination; summary.json written) or failed — the environment (data,
  network, device, disk, a run directory in use) or a Hydra-level mistake (an unknown option or setting, an
  override that does not parse): one sentence;
- 128 + N: interrupted by signal N (130 Ctrl-C, 143 SIGTERM, 138 SIGUSR1), after saving;
- 1: crashed — a bug; the traceback is printed and kept in summary.json.

In a multirun a job never ends the sweep's process: each ending is recorded in its summary.json and the
sweep's launcher (normlab.sweeps) reports every job and sets the sweep's exit code at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from normlab import distributed, requeue, suggest
from normlab.commands import sweep_command
from normlab.errors import UserError
from normlab.job import (
    EXIT_CRASHED,
    EXIT_FAILED,
    JobFailed,
    command_to_resume,
    crash_recorded,
    fail,
    job_outcome,
    sweep_group,
)
from normlab.train.run_dir import claim_sweep_dir, release_claims
from normlab.train.signals import ignored_from_now

log = logging.getLogger("normlab")


def threads_for_job(requested: int | None) -> int | None:
    """One torch thread per job under a parallel launcher (joblib): n_jobs processes then share the cores; under
    the stacked launcher, the cores divided by its n_jobs."""
    if requested:
        return int(requested)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    launcher = hydra_cfg.runtime.choices.get("hydra/launcher")
    if launcher == "stacked":  # a run that could not be stacked: the cores shared by the stacks at once
        from normlab.sweeps.stacked import threads_per_stack  # here: a single run does not import sweeps/

        return threads_per_stack(int(OmegaConf.select(hydra_cfg, "launcher.n_jobs") or 1))
    return 1 if launcher == "joblib" else None


# launchers that run a sweep's jobs at the same time, each in its own process sharing the terminal
PARALLEL_LAUNCHERS = ("joblib", "submitit_local")
# launchers whose job processes run one job (or one stack) and end (normlab.sweeps.worker): the run keeps
# its settled handler until the process exits, so a signal the parent passes on after the run ended (a
# second Ctrl-C) is said and ignored instead of abandoning the finished job's answer to the parent
ONE_JOB_PROCESS_LAUNCHERS = ("joblib", "stacked")


def keeps_signals() -> bool:
    """Whether this job's run keeps its settled handler until its process ends: a single run's command, or a
    job in a process of its own; not a job of the basic launcher, whose handler must come back between
    jobs, nor submitit's, whose handler must take a requeue signal handed back after the run."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return True
    return hydra_cfg.runtime.choices.get("hydra/launcher") in ONE_JOB_PROCESS_LAUNCHERS


def parallel_sweep() -> bool:
    """Whether this job runs beside others of its sweep (their bars would overwrite each other)."""
    hydra_cfg = HydraConfig.get()
    launcher = hydra_cfg.runtime.choices.get("hydra/launcher")
    return hydra_cfg.mode == RunMode.MULTIRUN and launcher in PARALLEL_LAUNCHERS


def resume_command(run_dir: Path, resume: str | None) -> str:
    """The command that continues this job in its own directory: its overrides, train.resume, the run dir."""
    return command_to_resume(list(HydraConfig.get().overrides.task), run_dir, resume)


def run_hydra_job(cfg: DictConfig) -> float | None:
    """Run one job; returns the final validation loss (for Hydra sweepers), None if it has none."""
    from normlab.train.run import Run

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    with crash_recorded(cfg, run_dir):  # a bug before the run exists still leaves summary.json
        requeue.join_submitit_tasks()  # a SLURM job of several tasks: one process group, like torchrun
        num_threads = cfg.train.num_threads if isinstance(cfg.train.num_threads, int) else None
        if not cfg.train.resume and requeue.requeued_resume(run_dir):
            log.info("requeued job: resuming the interrupted run in %s", run_dir)
            with open_dict(cfg):
                cfg.train.resume = str(run_dir)
        run = Run(
            cfg,
            run_dir,
            num_threads=threads_for_job(num_threads),
            group=sweep_group(),
            stop=requeue.stop_request(),
            resume_command=resume_command,
            dist=distributed.current(),
            step_time=not multirun,  # a sweep's jobs do not each need telling
            side_by_side=parallel_sweep(),  # its sweep prints one progress line for all its running jobs
            keep_signals=keeps_signals(),
        )
    try:
        summary = run.execute()
    except UserError as e:  # the run directory cannot be used: nothing was written
        fail(str(e), multirun)
        return None
    except Exception as e:  # a bug: summary.json has status crashed and the traceback; so will the console
        e.normlab_crash = True  # type: ignore[attr-defined]
        raise
    return job_outcome(summary, run_dir, multirun, run=run)


# ----------------------------------------------------------------------------------------------------
# Before Hydra writes anything: the run directory (normlab.train.run_dir decides, this says it)
# ----------------------------------------------------------------------------------------------------


class RunDirGuard(Callback):
    """Claims the run (or sweep) directory before Hydra writes .hydra/ or anything else there — locked first,
    then checked, so that of two starts at the same moment one owns it and the other is refused having
    written nothing — and refuses one that is a file, in use, or that holds an earlier run's results (a
    second run there would overwrite its config and mix its metrics): the sentences of
    normlab.train.run_dir, which owns the directory. The claim lasts until the command ends (`guarded`)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if refusal := suggest.sweep_without_multirun(config):  # a sweep preset without -m: nothing written
            print(f"error: {refusal}", file=sys.stderr)
            raise SystemExit(EXIT_FAILED)
        directory = _select(config, "hydra.run.dir")
        if directory is not None:
            from normlab.train.resume import admit  # here: it needs torch, which `--help` does not

            decision = self._claim(
                lambda: admit(Path(directory), _select(config, "train.resume"), config), config
            )
            if decision is not None and decision.skip:  # the run there is finished: it stays as it is
                write_nothing(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        directory = _select(config, "hydra.sweep.dir")
        if directory is not None:
            resume = _select(config, "train.resume")
            self._claim(
                lambda: claim_sweep_dir(Path(directory), resume, lambda: sweep_command(config)), config
            )

    @staticmethod
    def _claim(claim: Callable[[], Any], config: DictConfig) -> Any:
        try:
            return claim()
        except UserError as e:
            from normlab.config.environment import shown_as_written

            release_claims()
            print(f"error: {shown_as_written(str(e), config)}", file=sys.stderr)
            # SystemExit, not an Exception: Hydra turns a callback's exceptions into warnings
            raise SystemExit(EXIT_FAILED) from None


def write_nothing(config: DictConfig) -> None:
    """Keep Hydra from writing into the run directory for this job: no `.hydra/` (its config.yaml would
    say the skipped command's settings) and no train.log (its lines would be appended to the run's). For a
    `train.resume=auto` that finds its run finished: the run directory stays byte for byte as it was."""
    with open_dict(config), read_write(config):
        config.hydra.output_subdir = None
        logging_cfg = OmegaConf.select(config, "hydra.job_logging")
        if not isinstance(logging_cfg, DictConfig):
            return
        handlers = logging_cfg.get("handlers") or {}
        files = [name for name, h in handlers.items() if "filename" in (h or {})]
        for name in files:
            del handlers[name]
        for logger in [logging_cfg.get("root"), *(logging_cfg.get("loggers") or {}).values()]:
            if isinstance(logger, DictConfig) and logger.get("handlers") is not None:
                logger.handlers = [h for h in logger.handlers if h not in files]


def _select(config: DictConfig, key: str) -> str | None:
    try:
        value = OmegaConf.select(config, key)
    except Exception:  # an unresolvable value: the run itself reports it
        return None
    return None if value is None else str(value)


# ----------------------------------------------------------------------------------------------------
# Around Hydra: its own errors as one sentence
# ----------------------------------------------------------------------------------------------------


def hydra_sentence(exc: BaseException) -> str | None:
    """One sentence for an error Hydra raises before the job runs, or None if it is not one of those."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    text = str(exc).strip()
    if isinstance(exc, MissingConfigException):
        missing = exc.missing_cfg_file or ""
        if missing.startswith(f"{suggest.EXPERIMENT}/"):  # every preset, findings/* included
            from normlab.configs import CONFIG_DIR

            return suggest.unknown_preset(missing.split("/", 1)[1], Path(CONFIG_DIR))
        if "/" in missing and exc.options is not None:
            group, option = missing.rsplit("/", 1)
            return f"{group}={option} is not an option; {group} takes one of {', '.join(exc.options)}."
        return f"{text.splitlines()[0]}; check the config name and the configs/ folder."
    if isinstance(exc, OverrideParseException):
        override = getattr(exc, "override", "") or ""
        detail = text.splitlines()[0]
        return (
            f"Could not read the override {override} ({detail}); write it as key=value and quote values with "
            "spaces, brackets or commas (see python train.py --help)."
        )
    if isinstance(exc, ConfigCompositionException):
        if fix := suggest.sentence(text):  # an unknown key, a list value without brackets
            return fix
        if m := re.search(r"An item is already at '([^']+)'", text):
            return (
                f"{m.group(1)} is already a setting; set it without the leading +, e.g. {m.group(1)}=VALUE."
            )
        return f"{text.splitlines()[0]} (see python train.py --help)."
    if isinstance(exc, OmegaConfBaseException):
        key = getattr(exc, "full_key", None) or "a setting"
        return f"{key} could not be resolved ({text.splitlines()[0]}); fix that value or the ${{...}} in it."
    if isinstance(exc, OSError) and exc.filename is not None:
        return (
            f"Cannot create {exc.filename} ({exc.strerror}); point hydra.run.dir (or hydra.sweep.dir) at a "
            "writable place."
        )
    return None


@contextlib.contextmanager
def _full_hydra_errors() -> Iterator[None]:
    """Ask Hydra to raise errors to us instead of printing them (its HYDRA_FULL_ERROR switch)."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous


def join_torchrun(argv: list[str] | None = None) -> None:
    """Under torchrun: join the process group and give every rank rank 0's run directory (appended to
    sys.argv as Hydra overrides, before Hydra reads them); a no-op for a plain `python train.py`."""
    argv = sys.argv if argv is None else argv
    if not distributed.launched_by_torchrun():
        return
    if any(a in ("-m", "--multirun") for a in argv[1:]):
        print(
            "error: torchrun trains one run on several processes and cannot run a sweep (-m); sweep with "
            "hydra/launcher=slurm (one torchrun-style job per run) or drop -m.",
            file=sys.stderr,
        )
        sys.exit(EXIT_FAILED)
    dist = distributed.from_env()
    argv += distributed.shared_run_dir_override(argv[1:], dist)


def guarded(main: Callable[[], Any], what: str = "run") -> None:
    """Call a @hydra.main function; every error a user can cause ends as one sentence and its exit code.
    Once it has returned (or raised), the command's `what` (run or sweep) has ended: a stop signal from then
    until the process exits is said and ignored (normlab.train.signals.ignored_from_now)."""
    try:
        with _full_hydra_errors():
            try:
                main()
            finally:
                ignored_from_now(what)  # before anything else: the exit code is decided, the files saved
                release_claims()  # the run or sweep directory RunDirGuard claimed: the next command may use it
    except SystemExit:
        raise
    except KeyboardInterrupt:  # Ctrl-C outside a job (composing, between jobs): nothing to save
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except UserError as e:  # a failed job of a sweep, re-raised by Hydra at the end
        print(
            f"error: {e}" if not isinstance(e, JobFailed) else f"error: a job of this sweep failed: {e}",
            file=sys.stderr,
        )
        sys.exit(EXIT_FAILED)
    except Exception as e:
        sentence = None if getattr(e, "normlab_crash", False) else hydra_sentence(e)
        if sentence is None:  # a bug: the whole traceback
            traceback.print_exc()
            sys.exit(EXIT_CRASHED)
        print(f"error: {sentence}", file=sys.stderr)
        sys.exit(EXIT_FAILED)


@hydra.main(config_path="pkg://normlab.configs", config_name="config", version_base="1.3")
def _train(cfg: DictConfig) -> float | None:
    return run_hydra_job(cfg)


def main() -> None:
    """`normlab-train ...`, `python -m normlab ...` and `python train.py ...`: one Hydra job or sweep, with
    the configs shipped in the package (pkg://normlab.configs)."""
    from normlab.config import register
    from normlab.config.help import register_help_resolver

    register()  # every group's options, from their dataclasses, in Hydra's ConfigStore
    register_help_resolver()  # `--help` lists every knob with the text its dataclass field declares
    try:  # experiment=NAME as +experiment=NAME; a launcher without -m, resume=auto without its directory
        sys.argv[1:] = suggest.before_hydra(sys.argv[1:])
    except suggest.CommandLineError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    join_torchrun()  # torchrun: one process group and one run directory for all ranks
    # Hydra's own errors (unknown option, bad override, bad run dir) as one sentence
    guarded(_train, "sweep" if any(a in ("-m", "--multirun") for a in sys.argv[1:]) else "run")
