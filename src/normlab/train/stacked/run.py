"""`StackedRun`: the lifecycles of several runs (normlab.train.run.Run) around one `StackedTrainer`.

Each member is a `Run` of its own — its directory and lock, its config check and `train.resume=auto`
plan, its `running` summary, its checkpoint loaded into its own GPT, its W&B run, its metrics.jsonl,
checkpoints, spike reports, summary.json, sample and resume command — through the single run's own
methods (`_start`, `_finish`, `_checkpoints`, `_report`, `_ended_by`); what the members share is the
device, the corpus (one config, one load) and the trainer. The order is Run's:

1. every member's directory acquired and its start checked: a member whose config is invalid, whose
   checkpoint is missing, or that `train.resume=auto` finds finished leaves the stack there, with the
   summary a run alone would write;
2. build: the stack's memory against what is free, each member's GPT (its seed, its checkpoint), the
   corpus once, each member's W&B run, the trainer, each member's optimizer / RNG / monitor state;
3. train, signals deferred to step boundaries; as each member's run ends (diverged, failed, or at the
   end: completed or interrupted) its last.pt and summary.json are written at once and its sample drawn;
4. an exception that is the stack's (a signal before training, out of memory, a bug) ends every member
   still running as a run alone would end; a bug is recorded as crashed in each and raised again.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hydra.utils import instantiate

from normlab.config.groups import TrainConfig
from normlab.data import TokenCorpus
from normlab.data.unigram import baseline_unigram_loss
from normlab.errors import UserError
from normlab.metrics.sinks import JsonlSink
from normlab.metrics.wandb_sink import WandbSink
from normlab.train import checkpoint, memory
from normlab.train.build import device_label, log_model, pick_device, run_corpus
from normlab.train.callbacks import Callback, LoopResult
from normlab.train.run import Run
from normlab.train.signals import Interrupted, StopRequest
from normlab.train.stacked.trainer import MemberView, StackedTrainer

log = logging.getLogger("normlab")


class MemberRun(Run):
    """One member's Run; the stack (`StackedRun`) drives it through the steps a Run takes."""

    def __init__(
        self,
        *args: Any,
        as_job: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        **kwargs: Any,
    ) -> None:
        """Run's arguments; `as_job` makes this member's Hydra job the current one (its W&B job type reads
        the job's config group choices)."""
        super().__init__(*args, **kwargs)
        self.error: BaseException | None = None  # a directory that cannot be used, or a bug: for the caller
        self.view: MemberView | None = None
        self.kept_rows: list[dict[str, Any]] = []  # metrics.jsonl's rows from before a resume
        self.sink: JsonlSink | None = None
        self.as_job = as_job

    @property
    def alive(self) -> bool:
        """Still to be trained: started, and not yet ended."""
        return self.summary.status == "running"

    def build_model(self, device: torch.device) -> torch.nn.Module:
        """Its GPT, built as a run alone builds it (its seed, then the model), its checkpoint loaded."""
        cfg = self.cfg
        torch.manual_seed(cfg["seed"])
        model = instantiate(cfg["model"]).to(device)
        if self.resume.checkpoint is not None:
            checkpoint.load_model_state(model, self.resume.checkpoint)
        return model

    def prepare_member(self, model: torch.nn.Module, corpus: TokenCorpus, device: torch.device) -> None:
        """As Run._build: its corpus adopted (RunResume.adopt_corpus) and the summary's description of the run."""
        if self.resume.adopt_corpus(self.cfg, corpus.cache_dir, self.summary):
            self.write_summary()
        self.summary.update(
            device=device_label(device),
            baseline_unigram_loss=baseline_unigram_loss(corpus),
            formula=log_model(model, self.cfg),
            n_params=model.n_params(),
            world_size=1,
            global_batch_size=self.train.batch_size * self.train.grad_accum,
        )

    def open_wandb(self) -> None:
        if self.cfg["logger"]["name"] != "wandb":
            return
        with self.as_job():
            self.wandb = WandbSink.open(
                self.cfg,
                self.run_dir,
                self.group or str(self.cfg["experiment_name"]),
                fresh=self.resume.checkpoint is None,
                concurrent=True,
            )

    def callbacks(self, view: MemberView) -> list[Callback]:
        """What its run alone hands the loop (Run._callbacks): metrics.jsonl, W&B, progress, checkpoints."""
        callbacks, self.sink = self._callbacks(view)  # type: ignore[arg-type] (a MemberView reads as a Trainer)
        self.kept_rows = self.sink.kept if self.sink is not None else []
        return callbacks

    @property
    def log_prefix(self) -> str:
        return f"{self.cfg['name']} "

    def _settle(self) -> None:
        """Nothing: the stop request is the stack's, settled when every member has ended (`StackedRun`); a
        member that ends first (diverged) must not make the others deaf to a signal."""

    def end_training(self, result: LoopResult, error: BaseException | None, corpus: TokenCorpus) -> None:
        """Its run's ending, as a run alone's (Run._end_training): last.pt, summary.json, the console's lines,
        the sample; `error` (its callbacks failed) ends it as that exception ends a run."""
        view = self.view
        assert view is not None
        try:
            if error is not None:
                self.handle(error)
                return
            self._end_training(view, result, self.kept_rows, corpus)  # type: ignore[arg-type]
        except Exception as e:  # writing its files failed (a full disk): its ending, not the stack's
            self.handle(e)
        finally:
            self.close_wandb()

    def handle(self, e: BaseException) -> None:
        """End this run by exception `e` as Run's lifecycle does; a bug is kept in `error` for the caller."""
        if not self._ended_by(e):
            self.error = e

    def close_wandb(self) -> None:
        if self.wandb is not None:
            self.wandb.finish(self.summary.to_dict())
            self.wandb = None


class StackedRun:
    """`members` trained as one stack; `stop` is their shared stop request (signals reach all of them at
    the same step boundary). `execute` returns each member's summary (None where its directory could not
    be used: its `error` says why)."""

    def __init__(
        self,
        members: Sequence[MemberRun],
        stop: StopRequest,
        num_threads: int | None = None,
        keep_signals: bool = False,
    ) -> None:
        self.members = list(members)
        self.stop = stop
        self.num_threads = num_threads
        # in a process of its own (a stacked sweep's worker): the settled handler stays until it exits
        self.keep_signals = keep_signals
        for member in self.members:
            member.stop = stop

    def execute(self) -> list[dict[str, Any] | None]:
        acquired = []
        for member in self.members:
            try:
                member.directory.acquire()
                acquired.append(member)
            except UserError as e:  # in use, not writable: nothing can be written there
                member.error = e
        try:
            with self.stop.installed(keep_when_settled=self.keep_signals):
                self._lifecycle(acquired)
                # every member has ended: from here a signal changes nothing (Run.write_summary's settle)
                self.stop.settle("every member ended")
        finally:
            for member in acquired:
                member.directory.release()
        return [None if m not in acquired else m.summary.to_dict() for m in self.members]

    def _lifecycle(self, members: list[MemberRun]) -> None:
        started = []
        for member in members:
            member.started = time.time()
            try:
                if member._start():
                    started.append(member)
            except (Interrupted, KeyboardInterrupt) as e:
                for other in members:  # before training: nothing to save, every member stops
                    if other.alive:
                        other.handle(e)
                return
            except BaseException as e:
                member.handle(e)
        by_step: dict[int, list[MemberRun]] = {}
        for member in started:
            by_step.setdefault(
                member.resume.checkpoint.step if member.resume.checkpoint is not None else 0, []
            ).append(member)
        for group in by_step.values():  # members resumed from different steps train as separate stacks
            if self.stop():
                for member in group:
                    member.handle(Interrupted(self.stop.signum or signal.SIGTERM))
                continue
            self._train_group(group)

    def _train_group(self, group: list[MemberRun]) -> None:
        try:
            trainer, corpus = self._build(group)
            with self.stop.deferred():
                self._fit(group, trainer, corpus)
        except BaseException as e:  # the stack's ending (a bug is kept in each member's `error`)
            for member in group:
                if member.alive:
                    member.handle(e)
                member.close_wandb()

    def _build(self, group: list[MemberRun]) -> tuple[StackedTrainer, TokenCorpus]:
        first = group[0]
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        device = pick_device(first.train.device)
        memory.check_fits(first.cfg, device, runs=len(group))
        if device.type == "cuda":
            torch.set_float32_matmul_precision("high")
        models = [member.build_model(device) for member in group]
        corpus = run_corpus(first.cfg, progress=False)
        for member, model in zip(group, models, strict=True):
            member.prepare_member(model, corpus, device)
        for member in group:
            member.open_wandb()
        log.info(
            "stacked: %d runs as one model (%s) on %s",
            len(group),
            ", ".join(str(m.cfg["name"]) for m in group),
            device_label(device),
        )
        trainer = StackedTrainer(
            models,
            [m.cfg for m in group],
            corpus.train,
            corpus.val,
            device,
            reports_dirs=[m.run_dir for m in group],
            histograms=[m.wandb is not None for m in group],
        )
        trainer.load_member_states(
            [m.resume.checkpoint.state if m.resume.checkpoint is not None else None for m in group]
        )
        for m, member in enumerate(group):
            member.view = MemberView(trainer, m)
            member.trainer = member.view  # type: ignore[assignment] (what Run reads: step, monitor)
            member.summary.update(steps=trainer.step)
            if member.resume.checkpoint is not None:
                log.info(
                    "%s: resumed from %s at step %d",
                    member.cfg["name"],
                    member.resume.checkpoint.path,
                    trainer.step,
                )
                member.resume.checkpoint.state = {}
        return trainer, corpus

    def _fit(self, group: list[MemberRun], trainer: StackedTrainer, corpus: TokenCorpus) -> None:
        log.info(
            "training from step %d to %d in %s",
            trainer.step,
            TrainConfig.of(group[0].cfg["train"]).max_steps,
            ", ".join(str(m.run_dir) for m in group),
        )
        callbacks = [member.callbacks(member.view) for member in group]  # type: ignore[arg-type]

        def ended(m: int, result: LoopResult, error: BaseException | None) -> None:
            group[m].end_training(result, error, corpus)

        trainer.fit(callbacks, ended, stop=self.stop)
