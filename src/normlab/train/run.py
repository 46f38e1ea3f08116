"""One run, start to end: start → build → train, and `finish` writes summary.json however it ends.

The order matters for "nothing lost":

1. the run directory (normlab.train.run_dir): created, locked (one run at a time), stale temporary files of a
   killed writer removed;
2. start: the config checked against its dataclasses (normlab.config.checked); train.resume decided and
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
5. finish (`_finish`): the one place summary.json's final fields are put together, for the loop's ending as for an
   ending by an exception (`Ending`), all written atomically.

`execute` returns the summary for every ending but a crash (a bug: the summary records the traceback and
the exception is raised again) and a run directory it cannot use (UserError: nothing can be written there).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from normlab.config import checked
from normlab.config.groups import TrainConfig
from normlab.data import TokenCorpus
from normlab.data.unigram import baseline_unigram_loss, did_learn
from normlab.distributed import SINGLE, Dist
from normlab.errors import UserError
from normlab.io import write_text_atomic
from normlab.metrics import names
from normlab.metrics.monitor import SPIKES_DIR
from normlab.metrics.sinks import JsonlSink, read_rows
from normlab.metrics.wandb_sink import WandbSink
from normlab.summary import SUMMARY_FILE, RunSummary
from normlab.train import checkpoint, diagnosis, flops, memory, outcome, step_time
from normlab.train import resume as resumes
from normlab.train.build import device_label, log_model, pick_device, run_corpus
from normlab.train.callbacks import Callback, Checkpoints, LoopResult
from normlab.train.checkpoint import CHECKPOINT_DIR, LAST, Checkpoint
from normlab.train.loop import Trainer
from normlab.train.outcome import Ending
from normlab.train.progress import ProgressBar, ProgressLog
from normlab.train.resume import Decision, LeftAsItWas, ResumeRefused
from normlab.train.run_dir import METRICS_FILE, SAMPLE_FILE, RunDirectory, describe_steps
from normlab.train.sample import generate
from normlab.train.signals import StopRequest, exit_code

log = logging.getLogger("normlab")

# Builds the command that continues a run: (run dir, train.resume value or None for a fresh start) → str.
ResumeCommand = Callable[[Path, "str | None"], str]

__all__ = ["Run"]


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
        self.ckpt: Checkpoint | None = None
        self.restart = False  # train.resume=auto starting a run again: drop the rows there first
        self.decision = Decision()  # what train.resume made of this run (normlab.train.resume)
        self.previous: dict[str, Any] | None = None  # summary.json of the run this one continues in place
        self.experiment: dict[str, Any] | None = None  # what its checkpoints record of the experiment
        self.directory = RunDirectory(self.run_dir, (CHECKPOINT_DIR, SPIKES_DIR))

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
        if ending.status == "crashed":
            if self.summary.status == "running":
                self._finish(ending)
            return False
        if ending.status == "invalid":
            log.warning("invalid config, skipped: %s", ending.reason)
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

    def write_previous_summary(self) -> None:
        """Put back the summary.json the run directory held before this (refused) resume."""
        if not self.dist.is_main or self.previous is None:
            return
        if self.previous:
            RunSummary.from_dict(self.previous).write(self.run_dir)
        else:  # it had none: not the `running` this run may have written
            (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------------
    # start: the config, what to resume, `running`
    # ------------------------------------------------------------------------------------------------

    def _start(self) -> bool:
        """Check the config and decide what train.resume continues (every check made), then say `running`;
        False when train.resume=auto finds the run finished (its summary.json stays as it is)."""
        self._echo_config()
        self.cfg = checked(self.cfg_node)
        self.train = TrainConfig.of(self.cfg["train"])
        self._echo_config()
        self._preflight()
        # a resume of the run in this directory that is refused leaves it as it was
        self.previous = resumes.previous_summary(self.run_dir, self.train.resume)
        try:
            self.decision = resumes.decide(self.cfg, self.run_dir)
        except UserError as e:
            raise LeftAsItWas(e) if self.previous is not None else e from None
        if self.decision.skip:
            self.summary = RunSummary.read(self.run_dir)
            return False
        # starting again drops the rows of a run that saved no checkpoint
        self.restart = self.decision.restart
        self.ckpt = self.decision.checkpoint
        if self.ckpt is not None:
            before = self.decision.previous or {}  # what earlier resumes of this run recorded
            self.summary.update(
                resumed_from=f"{self.ckpt.path} (step {self.ckpt.step})",
                resume_changes=list(before.get("resume_changes") or []),
                missing_steps=[*(before.get("missing_steps") or []), *map(list, self.decision.missing)],
            )
            self._record_changes(self.decision.changes)
            if self.decision.missing:
                log.warning(
                    "resumed across steps without rows in metrics.jsonl (%s) on purpose: recorded in summary.json",
                    describe_steps(self.decision.missing),
                )
        self.write_summary(status="running")
        return True

    def _adopt_corpus(self, corpus: TokenCorpus) -> None:
        """A resumed run's corpus must be the one its checkpoint was trained on (by its files' hashes; a
        deliberate change is recorded); then what its checkpoints will record of the experiment."""
        if self.ckpt is not None:
            try:
                corpus_changes = resumes.check_corpus(
                    self.ckpt.state.get(checkpoint.EXPERIMENT_KEY),
                    self.ckpt.path,
                    corpus.cache_dir,
                    self.train.resume_allow,
                )
            except ResumeRefused as e:
                raise LeftAsItWas(e) if self.previous is not None else e from None
            if corpus_changes:
                self.decision.changes = [*self.decision.changes, *corpus_changes]
                self._record_changes(corpus_changes)
                self.write_summary()
        self.experiment = resumes.experiment_record(self.cfg, corpus.cache_dir)

    def _record_changes(self, changes: list[resumes.Change]) -> None:
        """Settings this resume changed on purpose (train.resume_allow), into summary.json."""
        assert self.ckpt is not None
        for change in changes:
            self.summary.resume_changes.append(change.record(self.ckpt.step))
            log.warning(
                "resumed at step %d with %s changed on purpose (%s → %s): recorded in summary.json",
                self.ckpt.step,
                change.key,
                change.was,
                change.now,
            )

    def _preflight(self) -> None:
        """Say, before anything is built, which known failure this setup matches (normlab.train.diagnosis):
        one warning line each, kept in summary.json's `preflight`."""
        notes = [n.sentence for n in diagnosis.preflight(self.cfg)]
        for sentence in notes:
            log.warning("pre-flight: %s", sentence)
        self.summary.update(preflight=notes)

    def _echo_config(self) -> None:
        """Copy the config's identity (norm, placement, depth, ...) into the summary, as far as it resolves."""
        if self.cfg:
            cfg = self.cfg
        else:
            try:
                cfg = (
                    OmegaConf.to_container(self.cfg_node, resolve=True)
                    if OmegaConf.is_config(self.cfg_node)
                    else dict(self.cfg_node)
                )
            except Exception:  # an unresolvable value: the check reports it
                return

        def pick(group: str) -> Any:
            value = cfg.get(group)
            return value.get("name") if isinstance(value, Mapping) else value

        self.summary.update(
            norm=pick("norm"),
            placement=pick("placement"),
            depth=cfg.get("depth"),
            warmup_steps=cfg.get("warmup_steps"),
            seed=cfg.get("seed"),
            name=cfg.get("name"),
        )

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
            if self.dist.is_main:  # checkpoints/last.pt, then the summary: both before anything else can fail
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
                log.info("sample: %s", text)

    def _fit(self, trainer: Trainer) -> tuple[LoopResult, list[dict[str, Any]]]:
        """Train; returns the loop's result and the rows metrics.jsonl kept from before a resume."""
        resume_step = trainer.step if self.ckpt is not None else None
        # logged where signals already wait for a step boundary (tests wait for this line)
        log.info("training from step %d to %d in %s", trainer.step, self.train.max_steps, self.run_dir)
        sink: JsonlSink | None = None
        callbacks: list[Callback] = []
        if self.dist.is_main:  # the rows are rank 0's to write
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
        result = trainer.fit(
            callbacks,
            # every rank stops at the same step, whichever of them got the signal
            stop=(lambda: self.dist.any(self.stop())) if self.dist.enabled else self.stop,
        )
        return result, sink.kept if sink is not None else []

    def _checkpoints(self, trainer: Trainer) -> Checkpoints:
        return Checkpoints(
            self.run_dir / CHECKPOINT_DIR, trainer.state_dict, self.cfg["model"], experiment=self.experiment
        )

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
        )
        return [ProgressBar(max_steps, trainer.step, name, bar, per_step), lines]

    # ------------------------------------------------------------------------------------------------
    # finish: summary.json, the one place its final fields are put together
    # ------------------------------------------------------------------------------------------------

    def write_summary(self, **fields: Any) -> RunSummary:
        self.summary.update(
            **fields, started_at=round(self.started, 3), wall_time_s=round(time.time() - self.started, 3)
        )
        if self.dist.is_main:
            self.summary.write(self.run_dir)
        if self.summary.status != "running":  # the final summary: later signals change nothing
            self.stop.settle(self.summary.status)
        return self.summary

    def _finish(
        self, ending: Ending, loop: tuple[Trainer, LoopResult, list[dict[str, Any]]] | None = None
    ) -> RunSummary:
        """Write summary.json for `ending`. Its numbers come from the loop where the loop ended the run
        (`loop`: the trainer, its result and the rows kept from before a resume), else from the rows
        metrics.jsonl holds; a crash adds its traceback."""
        fields: dict[str, Any] = {"status": ending.status, "reason": ending.reason}
        if loop is not None:
            fields.update(self._loop_fields(*loop))
        elif ending.status == "crashed":
            fields["traceback"] = ending.traceback
        else:
            fields.update(self._row_fields(ending))
        if ending.status == "interrupted":
            fields["signal"] = ending.signal
        if ending.status in ("failed", "interrupted"):
            fields["resume_command"] = self._continue_command(trained=loop is not None)
        elif loop is None and ending.status != "crashed":
            fields["resume_command"] = None
        return self.write_summary(**fields)

    def _loop_fields(
        self, trainer: Trainer, result: LoopResult, previous: list[dict[str, Any]]
    ) -> dict[str, Any]:
        losses = outcome.run_losses(previous, result.train_losses)
        numbers = outcome.after_training(
            previous,
            losses,
            result.val_losses.values(),
            result.tokens_per_s,
            self.train.flush_every,
        )
        fields = dict(
            steps=result.steps,
            diverged_at=result.diverged_at,
            final_val_loss=result.val_losses.get(result.steps) if result.status == "completed" else None,
            learned=did_learn(numbers["best_val_loss"], self.summary.baseline_unigram_loss),
            **numbers,
            **trainer.monitor.summary(),
            mfu=flops.mfu(numbers["tokens_per_s"], trainer.flops_per_token, trainer.peak_flops),
            load_avg=outcome.load_average(),
        )
        known = {
            "status": result.status,
            "baseline_unigram_loss": self.summary.baseline_unigram_loss,
            **fields,
        }
        note = diagnosis.cause(self.cfg, known, losses)
        return {**fields, "diagnosis": note.sentence if note is not None else None}

    def _row_fields(self, ending: Ending) -> dict[str, Any]:
        """The steps, and the numbers of the rows before them, of a run an exception ended: a stop before or
        without saving counts the steps the checkpoint holds; any other ending after the trainer was built
        counts its steps."""
        if ending.status == "interrupted":
            steps = self._steps()
            counted = self.ckpt is not None and not ending.forced  # what the rows of the run resumed say
            return {"steps": steps, **(self._fields_from_metrics(steps) if counted else {})}
        if self.trainer is None:
            return {}
        return {"steps": self.trainer.step, **self._fields_from_metrics(self.trainer.step)}

    def _steps(self) -> int:
        """The steps the model holds now: the trainer's, else the checkpoint's it will resume from, else 0."""
        if self.trainer is not None:
            return self.trainer.step
        return self.ckpt.step if self.ckpt is not None else 0

    def _fields_from_metrics(self, before: int) -> dict[str, Any]:
        path = self.run_dir / METRICS_FILE
        if not path.is_file():
            return {}
        try:
            lines, _ = read_rows(path)
        except OSError:
            return {}
        return outcome.from_rows([json.loads(line) for line in lines], before)

    def _continue_command(self, trained: bool) -> str | None:
        """How to continue: from this run's own checkpoint if a readable one is there (always, after the loop
        saved last.pt), else from the one it resumed; where every checkpoint there is damaged, with
        train.resume=auto, which starts the run again from step 0 (repeating the command would fail again)."""
        own = self.run_dir / CHECKPOINT_DIR
        if trained or checkpoint.newest(own) is not None:
            return self.resume_command(self.run_dir, str(self.run_dir))
        if checkpoint.candidates(own):
            return self.resume_command(self.run_dir, "auto")
        if self.ckpt is not None:
            return self.resume_command(self.run_dir, str(self.train.resume))
        return None
