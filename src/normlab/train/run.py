"""One run, read top to bottom: `execute` → start → build → train, and `_finish` writes summary.json however
the run ends. The order matters for "nothing lost":

1. the run directory (normlab.train.run_dir): created, locked (one run at a time), stale temporary files of a
   killed writer removed;
2. start (`_start`): the config checked against its dataclasses (normlab.config.checked); what train.resume
   does, decided once (`self.resume`, normlab.train.run_resume: with auto, what the directory holds decides
   whether to skip, resume or start; the checkpoint must be of the same model and experiment, and
   metrics.jsonl must hold every step it has trained) — a bad value or another experiment is `invalid`, a
   missing or damaged checkpoint or a hole in the rows `failed`, all before anything is built; then
   summary.json says `running`;
3. build (`_build`): the memory it needs against what is free (train.memory: a run that cannot fit is
   `invalid` in milliseconds), then device, model, data (its cache built atomically; a resumed run's corpus
   must be the checkpoint's, by its files' hashes); only then W&B, so a run that fails before training opens
   no W&B run, and the trainer;
4. train (`_train`): the loop, signals deferred to step boundaries (train.signals); at its end — completed,
   diverged or interrupted — pending metrics flushed, checkpoints/last.pt written, then summary.json;
5. finish (`_finish`): the one place summary.json's final fields are put together (normlab.train.
   summary_fields), for the loop's ending as for an ending by an exception (`Ending`), written atomically.

`execute` returns the summary for every ending but a crash (a bug: the summary records the traceback and
the exception is raised again) and a run directory it cannot use (UserError: nothing can be written there).
A refused resume in the run's own directory leaves it as it was (`LeftAsItWas`: its summary.json put back).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from normlab.config import checked
from normlab.config.environment import from_environment, shown_as_written
from normlab.config.groups import TrainConfig
from normlab.data import TokenCorpus
from normlab.data.unigram import baseline_unigram_loss
from normlab.distributed import SINGLE, Dist
from normlab.metrics import names
from normlab.metrics.monitor import SPIKES_DIR
from normlab.metrics.sinks import JsonlSink
from normlab.metrics.wandb_sink import WandbSink
from normlab.summary import SUMMARY_FILE, RunSummary
from normlab.train import checkpoint, diagnosis, memory, outcome
from normlab.train.build import device_label, log_model, pick_device, run_corpus
from normlab.train.callbacks import Callback, Checkpoints, LoopResult
from normlab.train.checkpoint import CHECKPOINT_DIR, LAST
from normlab.train.loop import Trainer
from normlab.train.outcome import Ending
from normlab.train.progress import bar_wanted, progress_callbacks
from normlab.train.resume import LeftAsItWas
from normlab.train.run_dir import METRICS_FILE, RunDirectory
from normlab.train.run_resume import RunResume
from normlab.train.sample import write_sample
from normlab.train.signals import StopRequest, exit_code
from normlab.train.summary_fields import (
    ResumeCommand,
    config_echo,
    continue_command,
    loop_fields,
    metrics_fields,
    resolved,
)

log = logging.getLogger("normlab")

__all__ = ["ResumeCommand", "Run"]


def default_resume_command(run_dir: Path, resume: str | None) -> str:
    return f"python train.py ... train.resume={resume}" if resume else "python train.py ..."


class Run:
    """The lifecycle of one training run in `run_dir`; `execute` returns the summary it wrote.

    `stop` is the stop request signals set (one is made if not given); `resume_command` builds the command
    printed and recorded for continuing an interrupted run (the CLI passes one that repeats its overrides).
    Under torchrun (`dist`) every rank trains and only rank 0 writes: the run directory, its lock, metrics,
    checkpoints, spike reports, summary.json, W&B and the sample.
    """

    def __init__(
        self,
        cfg: DictConfig | Mapping[str, Any],
        run_dir: Path,
        num_threads: int | None = None,
        group: str | None = None,
        stop: StopRequest | None = None,
        resume_command: ResumeCommand = default_resume_command,
        dist: Dist = SINGLE,
        step_time: bool = False,
        side_by_side: bool = False,
        keep_signals: bool = False,
    ) -> None:
        self.dist = dist
        # a single run's command: signals after the final summary stay ignored until the command ends
        self.keep_signals = keep_signals
        # say how long a step takes, measured on the first steps (a run typed at the command line)
        self.step_time = step_time
        # one of several jobs a parallel sweep runs at once: no bar, progress lines in train.log only
        self.side_by_side = side_by_side
        self.cfg_node = cfg
        self.cfg: dict[str, Any] = {}
        self.train: TrainConfig  # the train group, typed: set with self.cfg once the config is checked
        self.run_dir = Path(run_dir)
        self.num_threads = num_threads
        self.group = group
        self.stop = stop if stop is not None else StopRequest()
        self.resume_command = resume_command
        self.wandb: WandbSink | None = None
        self.started = time.time()
        self.summary = RunSummary()
        self.trainer: Trainer | None = None
        self.resume = RunResume(self.run_dir)  # what train.resume makes of this run (decided at its start)
        self.directory = RunDirectory(self.run_dir, (CHECKPOINT_DIR, SPIKES_DIR))
        self._writer: Checkpoints | None = None  # its checkpoint writer (`_checkpoints`)
        self._environment: dict[str, tuple[Any, str]] | None = None  # `environment`, worked out once

    def execute(self) -> dict[str, Any]:
        """Run to the end; returns summary.json's contents (`self.summary` holds the RunSummary)."""
        self.started = time.time()
        if self.dist.is_main:  # other ranks write nothing
            self.directory.acquire()
        try:
            with self.stop.installed(keep_when_settled=self.keep_signals):
                self._lifecycle()
        finally:
            self.directory.release()
        return self.summary.to_dict()

    def exit_code(self) -> int:
        """The process exit code this run's ending asks for: 128 + signal number when interrupted, else 0
        (the CLI adds its own for failed and crashed runs)."""
        if self.summary.status == "interrupted" and self.summary.signal:
            return exit_code(int(signal.Signals[self.summary.signal]))
        return 0

    def _lifecycle(self) -> None:
        try:
            if self._start():
                self._train(*self._build())
        except BaseException as e:
            if not self._ended_by(e):
                raise
        finally:
            if self.wandb is not None:  # however the run ended, so a multirun logs each job as its own run
                self.wandb.finish(self.summary.to_dict())

    def _ended_by(self, e: BaseException) -> bool:
        """Write the summary of the ending `e` means; False for a bug (recorded as crashed), to raise again,
        and for a resume refused in the run's own directory (its summary.json put back as it was)."""
        if isinstance(e, LeftAsItWas):
            if self.dist.is_main:
                self.resume.put_back_summary()
            return False
        ending = outcome.ending_of(e, self._steps())
        if ending.reason:  # a value from the environment is named as the config writes it
            ending = dataclasses.replace(ending, reason=shown_as_written(ending.reason, self.cfg_node))
        if ending.status == "crashed":
            if self.summary.status == "running":
                self._finish(ending)
            return False
        if ending.status == "invalid":  # a sweep's job (keep_signals False) is skipped and the sweep goes on
            log.warning("invalid config%s: %s", "" if self.keep_signals else ", skipped", ending.reason)
        try:
            self._finish(ending)
        except OSError as err:  # e.g. the disk is full: the sentence still reaches the console
            log.error(
                "could not write %s (%s); the run ended as %s: %s",
                SUMMARY_FILE,
                err.strerror,
                ending.status,
                ending.reason,
            )
        return True

    def record_crash(self, e: BaseException) -> None:
        """A bug `e` raised before this run could start (its job's set-up): summary.json says `crashed` with
        the traceback, as a crash in the run would leave it. Nothing is written into a directory another
        process holds, nor over a summary that already says how the run ended."""
        if not self.dist.is_main:
            return
        try:
            self.directory.acquire()
        except Exception:  # in use, or not writable: nothing can be written there
            return
        try:
            earlier = RunSummary.read(self.run_dir) if (self.run_dir / SUMMARY_FILE).is_file() else None
            if earlier is None or earlier.status == "running":
                self._echo_config()
                self._ended_by(e)
        except Exception:  # recording the crash must not hide it
            log.exception("could not record the crash in %s", self.run_dir / SUMMARY_FILE)
        finally:
            self.directory.release()

    # ------------------------------------------------------------------------------------------------
    # start: the config, what train.resume does, `running`
    # ------------------------------------------------------------------------------------------------

    def _start(self) -> bool:
        """Check the config and decide what train.resume continues (every check made), then say `running`;
        False when train.resume=auto finds the run finished (its summary.json stays as it is)."""
        self._echo_config()
        self.cfg = checked(self.cfg_node)
        for key in ("name", "experiment_name"):  # labels: shown, logged and sent as written
            if key in self.environment:
                self.cfg[key] = self.environment[key][1]
        self.train = TrainConfig.of(self.cfg["train"])
        self._echo_config()
        # which known failure this setup matches, said before anything is built
        self.summary.update(preflight=diagnosis.say_preflight(self.cfg))
        self.resume.decide(self.cfg)
        if self.resume.decision.skip:
            self.summary = RunSummary.read(self.run_dir)
            return False
        self.resume.record_start(self.summary)
        self.write_summary(status="running")
        return True

    def _echo_config(self) -> None:
        """Copy the config's identity (norm, placement, depth, ...) into the summary, as far as it resolves."""
        cfg = self.cfg or resolved(self.cfg_node)
        if cfg is not None:
            self.summary.update(**config_echo(cfg, self.environment))

    @property
    def environment(self) -> dict[str, tuple[Any, str]]:
        """The settings whose values come from ${oc.env:…} (config.environment), worked out once."""
        if self._environment is None:
            self._environment = from_environment(self.cfg_node)
        return self._environment

    # ------------------------------------------------------------------------------------------------
    # build: device, model, data, W&B, trainer
    # ------------------------------------------------------------------------------------------------

    def _build(self) -> tuple[Trainer, TokenCorpus]:
        cfg = self.cfg
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        torch.manual_seed(cfg["seed"])
        device = self.dist.device(pick_device(self.train.device))
        memory.check_fits(cfg, device, self.dist.world_size)  # before anything is allocated
        if device.type == "cuda":  # TF32 tensor cores for float32 matmuls (train.peak_flops counts them)
            torch.set_float32_matmul_precision("high")
        self.summary.update(device=device_label(device))
        model = instantiate(cfg["model"]).to(device)
        corpus = run_corpus(cfg, self._progress_enabled())
        if self.resume.adopt_corpus(self.cfg, corpus.cache_dir, self.summary):
            self.write_summary()
        self.summary.update(baseline_unigram_loss=baseline_unigram_loss(corpus))
        self.summary.update(
            formula=log_model(model, cfg),
            n_params=model.n_params(),
            world_size=self.dist.world_size,
            global_batch_size=self.train.batch_size * self.train.grad_accum * self.dist.world_size,
        )
        if (
            self.resume.checkpoint is not None
        ):  # before W&B: a checkpoint that does not fit is the config's fault
            checkpoint.load_model_state(model, self.resume.checkpoint)
        if cfg["logger"]["name"] == "wandb" and self.dist.is_main:
            # only now: a run that fails before training opens no W&B run
            # a resume continues the W&B run whose id the directory keeps; a restart from step 0 starts anew
            self.wandb = WandbSink.open(
                cfg,
                self.run_dir,
                self.group or str(cfg["experiment_name"]),
                fresh=self.resume.checkpoint is None,
            )
        trainer = Trainer.from_config(
            cfg,
            model,
            corpus.train,
            corpus.val,
            device,
            reports_dir=self.run_dir if self.dist.is_main else None,
            histograms=self.wandb is not None,  # W&B alone shows them: not computed for nobody
            dist=self.dist,
        )
        if self.resume.checkpoint is not None:
            trainer.load_state_dict(self.resume.checkpoint.state)
            log.info("resumed from %s at step %d", self.resume.checkpoint.path, trainer.step)
            self.resume.checkpoint.state = {}  # the tensors now live in the model and the optimizer
        self.trainer = trainer
        self.summary.update(steps=trainer.step)
        return trainer, corpus

    # ------------------------------------------------------------------------------------------------
    # train: the loop, last.pt, summary.json, the sample
    # ------------------------------------------------------------------------------------------------

    def _train(self, trainer: Trainer, corpus: TokenCorpus) -> None:
        with self.stop.deferred():  # from here a signal stops at the next step boundary
            result, previous = self._fit(trainer)
            self._end_training(trainer, result, previous, corpus)

    def _fit(self, trainer: Trainer) -> tuple[LoopResult, list[dict[str, Any]]]:
        """Train; returns the loop's result and the rows metrics.jsonl kept from before a resume."""
        # logged where signals already wait for a step boundary (tests wait for this line)
        log.info("training from step %d to %d in %s", trainer.step, self.train.max_steps, self.run_dir)
        callbacks, sink = self._callbacks(trainer)
        result = trainer.fit(
            callbacks,
            # every rank stops at the same step, whichever of them got the signal
            stop=(lambda: self.dist.any(self.stop())) if self.dist.enabled else self.stop,
        )
        return result, sink.kept if sink is not None else []

    def _callbacks(self, trainer: Trainer) -> tuple[list[Callback], JsonlSink | None]:
        """What the training loop reports this run's rows to — metrics.jsonl (after a resume, appended to the
        rows it keeps), W&B, the progress lines and bar, the checkpoints — and the metrics.jsonl sink; none
        on ranks other than 0 (the rows are rank 0's to write). A stack's members have the same
        (normlab.train.stacked.run.MemberRun)."""
        if not self.dist.is_main:
            return [], None
        self.resume.retire_abandoned()
        decision = self.resume.decision
        resume_step = trainer.step if decision.checkpoint is not None else None
        mark = {names.RESUME_CHANGED: 1} if decision.changes else {}
        if decision.missing:
            mark[names.RESUME_GAP] = 1
        # starting again (train.resume=auto) drops the rows of a run that saved no checkpoint
        sink = JsonlSink(
            self.run_dir / METRICS_FILE, resume_step=0 if decision.restart else resume_step, mark=mark
        )
        callbacks = [
            sink,
            *([self.wandb] if self.wandb is not None else []),
            *self._progress(trainer),
            self._checkpoints(trainer),
        ]
        return callbacks, sink

    def _end_training(
        self, trainer: Trainer, result: LoopResult, previous: list[dict[str, Any]], corpus: TokenCorpus
    ) -> None:
        """The run's ending when its loop ended it (completed, diverged, interrupted at a step boundary):
        checkpoints/last.pt, then summary.json — both before anything else can fail —, the console's lines
        and the sample; a run alone's and each stack member's (normlab.train.stacked.run)."""
        if self.dist.is_main:
            self._checkpoints(trainer).save(LAST)
        self._finish(outcome.loop_ending(result, self.stop.signal_name), loop=(trainer, result, previous))
        self._report(trainer, result)
        if result.status == "completed" and result.steps > 0 and self.dist.is_main:
            write_sample(trainer.model, corpus, self.cfg, trainer.device, self.run_dir, self.log_prefix)

    @property
    def log_prefix(self) -> str:
        """What the console's lines about this run start with: nothing for a run alone (one of a stack's
        members says its name)."""
        return ""

    def _checkpoints(self, trainer: Trainer) -> Checkpoints:
        """The run's checkpoint writer: one for the run, so that last.pt records the last row it saw."""
        if self._writer is None:
            self._writer = Checkpoints(
                self.run_dir / CHECKPOINT_DIR,
                trainer.state_dict,
                self.cfg["model"],
                experiment=self.resume.experiment,
            )
        return self._writer

    def _report(self, trainer: Trainer, result: LoopResult) -> None:
        """What the console hears at the end: learned or not, spikes, divergence."""
        outcome.say_outcome(self.summary, len(trainer.monitor.spike_steps), result, self.run_dir)

    def _progress_enabled(self) -> bool:
        return bar_wanted(self.train.progress, self.side_by_side)

    def _progress(self, trainer: Trainer) -> list[Callback]:
        bar, side_by_side = self._progress_enabled(), self.side_by_side
        return progress_callbacks(self.cfg, trainer, bar, side_by_side, hint=self.step_time)

    # ------------------------------------------------------------------------------------------------
    # finish: summary.json
    # ------------------------------------------------------------------------------------------------

    def write_summary(self, **fields: Any) -> RunSummary:
        self.summary.update(
            **fields, started_at=round(self.started, 3), wall_time_s=round(time.time() - self.started, 3)
        )
        if self.dist.is_main:
            self.summary.write(self.run_dir)
        if self.summary.status != "running":  # the final summary: later signals change nothing
            self._settle()
        return self.summary

    def _settle(self) -> None:
        self.stop.settle(self.summary.status)

    def _finish(
        self, ending: Ending, loop: tuple[Trainer, LoopResult, list[dict[str, Any]]] | None = None
    ) -> RunSummary:
        """Write summary.json for `ending`. Its numbers come from the loop where the loop ended the run
        (`loop`: the trainer, its result and the rows kept from before a resume), else from the rows
        metrics.jsonl holds; a crash adds its traceback."""
        fields: dict[str, Any] = {"status": ending.status, "reason": ending.reason}
        if loop is not None:
            trainer, result, previous = loop
            fields.update(
                loop_fields(self.cfg, trainer, result, previous, self.summary.baseline_unigram_loss)
            )
        elif ending.status == "crashed":
            fields["traceback"] = ending.traceback
        else:
            fields.update(self._row_fields(ending))
        if ending.status == "interrupted":
            fields["signal"] = ending.signal
        if ending.status in ("failed", "interrupted"):
            fields["resume_command"] = continue_command(
                self.run_dir,
                trained=loop is not None,
                resumed=self.resume.checkpoint is not None,
                resume=self.train.resume,
                command=self.resume_command,
            )
        elif loop is None and ending.status != "crashed":
            fields["resume_command"] = None
        return self.write_summary(**fields)

    def _row_fields(self, ending: Ending) -> dict[str, Any]:
        """The steps, and the numbers of the rows before them, of a run an exception ended: a stop before or
        without saving counts the steps the checkpoint holds; any other ending after the trainer was built
        counts its steps."""
        if ending.status == "interrupted":
            steps = self._steps()
            counted = (
                self.resume.checkpoint is not None and not ending.forced
            )  # what the rows of the run resumed say
            return {"steps": steps, **(metrics_fields(self.run_dir, steps) if counted else {})}
        if self.trainer is None:
            return {}
        return {"steps": self.trainer.step, **metrics_fields(self.run_dir, self.trainer.step)}

    def _steps(self) -> int:
        """The steps the model holds now: the trainer's, else the checkpoint's it will resume from, else 0."""
        if self.trainer is not None:
            return self.trainer.step
        return self.resume.checkpoint.step if self.resume.checkpoint is not None else 0
