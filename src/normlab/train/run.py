"""One run, start to end: start → build → train, and `finish` writes summary.json however it ends.

The order matters for "nothing lost":

1. the run directory (normlab.train.run_dir): created, locked (one run at a time), stale temporary files of a
   killed writer removed;
2. start (normlab.train.run_start): the config checked against its dataclasses (normlab.config.checked); train.resume decided and
   checked (normlab.train.resume: with auto, what the directory holds decides whether to skip, resume or
   start; the checkpoint must be of the same model and experiment, and metrics.jsonl must hold every step
   it has trained) — a bad value or another experiment is `invalid`, a missing or damaged checkpoint or a
   hole in the rows `failed`, all before anything is built; then summary.json says `running`;
3. build: the memory it needs against what is free (train.memory: a run that cannot fit is `invalid` in
   milliseconds), then device, model, data (its cache is built atomically; a resumed run's corpus must be
   the checkpoint's, by its files' hashes); only then W&B, so a run that fails before training opens no
   W&B run, and the trainer;
4. train: the loop, with signals deferred to step boundaries (train.signals); at its end — completed,
   diverged or interrupted — pending metrics are flushed, checkpoints/last.pt written, then summary.json;
5. finish (`_finish`, normlab.train.run_end): the one place summary.json's final fields are put together,
   for the loop's ending as for an ending by an exception (`Ending`), all written atomically.

`execute` returns the summary for every ending but a crash (a bug: the summary records the traceback and
the exception is raised again) and a run directory it cannot use (UserError: nothing can be written there).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from normlab.config.environment import shown_as_written
from normlab.config.groups import TrainConfig
from normlab.data import TokenCorpus
from normlab.data.unigram import baseline_unigram_loss
from normlab.distributed import SINGLE, Dist
from normlab.io import write_text_atomic
from normlab.metrics import names
from normlab.metrics.monitor import SPIKES_DIR
from normlab.metrics.sinks import JsonlSink
from normlab.metrics.wandb_sink import WandbSink
from normlab.summary import SUMMARY_FILE, RunSummary, free_room
from normlab.train import checkpoint, memory, outcome, step_time
from normlab.train.build import device_label, log_model, pick_device, run_corpus
from normlab.train.callbacks import Callback, Checkpoints, LoopResult
from normlab.train.checkpoint import CHECKPOINT_DIR, LAST, Checkpoint
from normlab.train.loop import Trainer
from normlab.train.progress import ProgressBar, ProgressLog
from normlab.train.resume import Decision, LeftAsItWas
from normlab.train.run_dir import METRICS_FILE, SAMPLE_FILE, RunDirectory
from normlab.train.run_end import ResumeCommand, RunEnd
from normlab.train.run_start import RunStart
from normlab.train.sample import generate, one_line
from normlab.train.signals import StopRequest, exit_code

log = logging.getLogger("normlab")

__all__ = ["Run"]


def default_resume_command(run_dir: Path, resume: str | None) -> str:
    return f"python train.py ... train.resume={resume}" if resume else "python train.py ..."


class Run(RunStart, RunEnd):
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
        self.ckpt: Checkpoint | None = None
        self.restart = False  # train.resume=auto starting a run again: drop the rows there first
        self.decision = Decision()  # what train.resume made of this run (normlab.train.resume)
        self.previous: dict[str, Any] | None = None  # summary.json of the run this one continues in place
        self.experiment: dict[str, Any] | None = None  # what its checkpoints record of the experiment
        self.directory = RunDirectory(self.run_dir, (CHECKPOINT_DIR, SPIKES_DIR))
        self._writer: Checkpoints | None = None  # its checkpoint writer (`_checkpoints`)
        self.resumed_step = (
            0  # the step of the checkpoint it continues (kept: its state is freed once loaded)
        )

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
            self.write_previous_summary()
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

    def write_previous_summary(self) -> None:
        """Put back the summary.json the run directory held before this (refused) resume."""
        if not self.dist.is_main or self.previous is None:
            return
        free_room(self.run_dir)  # kept for a summary this run will not write
        if self.previous:
            RunSummary.from_dict(self.previous).write(self.run_dir)
        else:  # it had none: not the `running` this run may have written
            (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)

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
        self._adopt_corpus(corpus)
        self.summary.update(baseline_unigram_loss=baseline_unigram_loss(corpus))
        self.summary.update(
            formula=log_model(model, cfg),
            n_params=model.n_params(),
            world_size=self.dist.world_size,
            global_batch_size=self.train.batch_size * self.train.grad_accum * self.dist.world_size,
        )
        if self.ckpt is not None:  # before W&B: a checkpoint that does not fit is the config's fault
            checkpoint.load_model_state(model, self.ckpt)
        if cfg["logger"]["name"] == "wandb" and self.dist.is_main:
            # only now: a run that fails before training opens no W&B run
            # a resume continues the W&B run whose id the directory keeps; a restart from step 0 starts anew
            self.wandb = WandbSink.open(
                cfg, self.run_dir, self.group or str(cfg["experiment_name"]), fresh=self.ckpt is None
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
        if self.ckpt is not None:
            trainer.load_state_dict(self.ckpt.state)
            log.info("resumed from %s at step %d", self.ckpt.path, trainer.step)
            self.ckpt.state = {}  # the tensors now live in the model and the optimizer
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
        self._retire_abandoned()
        resume_step = trainer.step if self.ckpt is not None else None
        mark = {names.RESUME_CHANGED: 1} if self.decision.changes else {}
        if self.decision.missing:
            mark[names.RESUME_GAP] = 1
        sink = JsonlSink(
            self.run_dir / METRICS_FILE, resume_step=0 if self.restart else resume_step, mark=mark
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
        sample = self.dist.is_main and self.train.sample_tokens > 0
        if result.status == "completed" and result.steps > 0 and sample:
            text = generate(
                trainer.model,
                corpus,
                self.train.sample_prompt,
                self.train.sample_tokens,
                trainer.device,
                seed=self.cfg["seed"],
            )
            write_text_atomic(self.run_dir / SAMPLE_FILE, text + "\n")
            log.info("%ssample: %s", self.log_prefix, one_line(text))

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
                experiment=self.experiment,
            )
        return self._writer

    def _retire_abandoned(self) -> None:
        """A run that goes on in its own directory from an older step than its newest checkpoints (a rewind
        with train.resume=…/step_N.pt, auto sent back by missing rows, a start again from step 0) abandons
        their history: they are retired before its first row, so nothing resumes from them (one history per
        run directory: normlab.train.checkpoint.retire)."""
        if not self.dist.is_main:
            return
        if self.restart:
            checkpoint.retire(self.run_dir / CHECKPOINT_DIR, 0)
        elif self.ckpt is not None and self.decision.in_place:
            checkpoint.retire(self.run_dir / CHECKPOINT_DIR, self.resumed_step)

    def _report(self, trainer: Trainer, result: LoopResult) -> None:
        """What the console hears at the end: learned or not, spikes, divergence."""
        if self.summary.learned is not None:
            log.info(
                "best val loss %.3f vs the corpus's unigram baseline %.3f: %s",
                self.summary.best_val_loss,
                self.summary.baseline_unigram_loss,
                "learned" if self.summary.learned else "did NOT learn (not clearly below the unigram loss)",
            )
        if self.summary.diagnosis:
            log.warning("likely cause: %s", self.summary.diagnosis)
        if trainer.monitor.spike_steps:
            log.info(
                "%d steps with a loss or grad-norm spike; reports in %s/spikes",
                len(trainer.monitor.spike_steps),
                self.run_dir,
            )
        if result.status == "diverged":
            log.warning("diverged at step %d: %s", result.diverged_at, result.reason)

    def _progress_enabled(self) -> bool:
        setting = self.train.progress
        if setting == "auto":
            return sys.stderr.isatty() and not self.side_by_side
        return bool(setting)

    def _progress(self, trainer: Trainer) -> list[Callback]:
        """The bar (on a terminal) and the progress lines (normlab.train.progress): the lines reach the
        console only where no bar is drawn and the run is not one of a parallel sweep's."""
        bar = self._progress_enabled()
        name, max_steps, per_step = self.cfg["name"], self.train.max_steps, trainer.tokens_per_step
        lines = ProgressLog(
            name,
            max_steps,
            self.train.log_every,
            per_step,
            console=not bar and not self.side_by_side,
            hint=self.step_time and trainer.step < max_steps,
            tiny_flops_ratio=step_time.tiny_flops_ratio(self.cfg) if trainer.device.type == "cpu" else None,
            first_block=self.train.flush_every,
        )
        return [ProgressBar(max_steps, trainer.step, name, bar, per_step), lines]
