"""One run, start to end: check the config, build everything, train, and always leave a summary.json.

The order matters for "nothing lost":

1. the run directory: created, locked (one run at a time), stale temporary files of a killed writer removed;
   with train.resume=auto, what the directory holds decides whether to skip, resume or start (train.resume);
2. the config checked against the schemas, and the checkpoint to resume found and matched to the model —
   a bad value is `invalid`, a missing or damaged checkpoint `failed`, both before anything is built;
3. the memory it needs against what is free (train.memory: a run that cannot fit is `invalid` in
   milliseconds), then device, data (its cache is built atomically), model; only then W&B, so a run that
   fails before training opens no W&B run;
4. the loop, with signals deferred to step boundaries (train.signals); at the end — completed, diverged or
   interrupted — pending metrics are flushed, checkpoints/last.pt and summary.json are written atomically.

`execute` returns the summary for every ending but a crash (a bug: the summary records the traceback and
the exception is raised again) and a run directory it cannot use (UserError: nothing can be written there).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from normlab.config import checked
from normlab.data import TokenCorpus, load_corpus
from normlab.data.corpus import CorpusTooShort
from normlab.data.unigram import baseline_unigram_loss, did_learn
from normlab.distributed import SINGLE, Dist
from normlab.errors import InvalidConfig, UserError
from normlab.io import write_text_atomic
from normlab.metrics.monitor import SPIKES_DIR
from normlab.metrics.sinks import JsonlSink, read_rows
from normlab.metrics.wandb_sink import WandbSink
from normlab.model import block_formula
from normlab.train import checkpoint, flops, memory, outcome, step_time
from normlab.train import resume as resume_plan
from normlab.train.callbacks import Callback, Checkpoints, ProgressBar
from normlab.train.checkpoint import CHECKPOINT_DIR, LAST, Checkpoint
from normlab.train.loop import LoopResult, Trainer
from normlab.train.resume import AUTO
from normlab.train.run_dir import DISK_ERRNOS, LOCK_FILE, METRICS_FILE, RunDirectory, disk_error
from normlab.train.sample import generate
from normlab.train.signals import Interrupted, StopRequest, exit_code, signal_name
from normlab.train.summary import SUMMARY_FILE, RunSummary

log = logging.getLogger("normlab")

SAMPLE_FILE = "sample.txt"
SKIP = "skip"  # _plan_auto's answer for a run that has nothing left to do

# Builds the command that continues a run: (run dir, train.resume value or None for a fresh start) → str.
ResumeCommand = Callable[[Path, "str | None"], str]

__all__ = ["LOCK_FILE", "METRICS_FILE", "SAMPLE_FILE", "SUMMARY_FILE", "Run", "pick_device"]


def default_resume_command(run_dir: Path, resume: str | None) -> str:
    return f"python train.py ... train.resume={resume}" if resume else "python train.py ..."


def device_label(device: torch.device) -> str:
    """'cpu (2 cores, 1 torch thread)' or the CUDA device's name: what a run's tokens/s was measured on."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    return f"{device.type} ({cores} cores, {threads} torch thread{'s' if threads != 1 else ''})"


def load_average() -> float | None:
    """The machine's 1-minute load average, None where the OS has none (Windows)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "train.device=cuda was asked for but no CUDA device is visible; use train.device=cpu or auto."
        )
    return torch.device(requested)


def cancelled_names(model: torch.nn.Module) -> str:
    """The parameters the norm cancels (GPT.norm_cancelled_parameters), one name for all blocks: "" if none."""
    names: dict[str, None] = {}
    for name, _, rows in model.norm_cancelled_parameters():
        name = re.sub(r"^blocks\.\d+\.", "blocks.*.", name)
        names[name if rows == slice(None) else f"{name}[{rows.start}:{rows.stop}]"] = None
    return ", ".join(names)


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
    ) -> None:
        self.dist = dist
        # say first how long a step will take (a run typed at a CPU's command line, not a sweep's job)
        self.step_time = step_time
        self.cfg_node = cfg
        self.cfg: dict[str, Any] = {}
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
        self.directory = RunDirectory(self.run_dir, (CHECKPOINT_DIR, SPIKES_DIR))

    # ------------------------------------------------------------------------------------------------
    # the summary
    # ------------------------------------------------------------------------------------------------

    def write_summary(self, **fields: Any) -> RunSummary:
        self.summary.update(
            **fields, started_at=round(self.started, 3), wall_time_s=round(time.time() - self.started, 3)
        )
        if self.dist.is_main:
            self.summary.write(self.run_dir)
        return self.summary

    # ------------------------------------------------------------------------------------------------
    # the lifecycle
    # ------------------------------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        """Run to the end; returns summary.json's contents (`self.summary` holds the RunSummary)."""
        self.started = time.time()
        if self.dist.is_main:  # other ranks write nothing
            self.directory.acquire()
        try:
            with self.stop.installed():
                self._lifecycle()
        finally:
            self.directory.release()
        return self.summary.to_dict()

    def _lifecycle(self) -> None:
        try:
            self._echo_config()
            self.cfg = checked(self.cfg_node)
            self._echo_config()
            resume = self.cfg["train"]["resume"]
            if resume == AUTO:
                resume = self._plan_auto()
                if resume == SKIP:
                    return
            if resume:
                self.ckpt = checkpoint.find_checkpoint(resume)
                checkpoint.check_compatible(self.ckpt, self.cfg["model"])
                self.summary.update(resumed_from=f"{self.ckpt.path} (step {self.ckpt.step})")
            self.write_summary(status="running")
            self._run()
        except UserError as e:  # InvalidConfig included: its status is invalid
            if e.status == "invalid":
                log.warning("invalid config, skipped: %s", e)
            self._end(e.status, reason=str(e))
        except OSError as e:
            if e.errno not in DISK_ERRNOS:
                self._crash(e)
                raise
            self._end("failed", reason=str(disk_error(e)))
        except Exception as e:
            if not memory.out_of_memory(e):  # a bug
                self._crash(e)
                raise
            self._end("failed", reason=str(memory.out_of_memory_error(e)))
        except (Interrupted, KeyboardInterrupt) as e:
            signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
            forced = isinstance(e, Interrupted) and e.forced
            self._interrupted(signum, forced=forced)
        except BaseException as e:
            self._crash(e)
            raise
        finally:
            if self.wandb is not None:  # however the run ended, so a multirun logs each job as its own run
                self.wandb.finish(self.summary.to_dict())

    def _plan_auto(self) -> str | None:
        """train.resume=auto: SKIP (the summary there stays as it is), the checkpoint to resume, or None to
        start — again, if the directory holds rows of a run that saved no checkpoint (they are dropped)."""
        # check_lock=False: the lock is ours, so a `running` summary is a dead process's
        plan = resume_plan.plan(self.run_dir, self.cfg["train"]["max_steps"], check_lock=False)
        log.info("train.resume=auto: %s: %s", self.run_dir, plan.sentence)
        if plan.action == resume_plan.SKIP:
            self.summary = RunSummary.read(self.run_dir)
            return SKIP
        self.restart = plan.action == resume_plan.START
        return str(plan.checkpoint) if plan.checkpoint is not None else None

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

    def _end(self, status: str, reason: str, **fields: Any) -> None:
        """Write the summary of a run that ends early (invalid, failed, interrupted before or without saving)."""
        try:
            if self.trainer is not None and "steps" not in fields:  # it trained: its true numbers
                fields = {
                    "steps": self.trainer.step,
                    **self._fields_from_metrics(self.trainer.step),
                    **fields,
                }
            command = self._continue_command() if status in ("failed", "interrupted") else None
            self.write_summary(status=status, reason=reason, resume_command=command, **fields)
        except OSError as e:  # e.g. the disk is full: the sentence still reaches the console
            log.error(
                "could not write %s (%s); the run ended as %s: %s", SUMMARY_FILE, e.strerror, status, reason
            )

    def _continue_command(self) -> str | None:
        """How to continue: from this run's own checkpoint if there is one, else from the one it resumed."""
        if checkpoint.candidates(self.run_dir / CHECKPOINT_DIR):
            return self.resume_command(self.run_dir, str(self.run_dir))
        if self.ckpt is not None:
            return self.resume_command(self.run_dir, str(self.cfg["train"]["resume"]))
        return None

    def _crash(self, e: BaseException) -> None:
        if self.summary.status in ("running",):
            self.write_summary(
                status="crashed",
                reason=f"{type(e).__name__}: {e}",
                traceback="".join(traceback.format_exception(e)),
            )

    def _interrupted(self, signum: int, forced: bool = False) -> None:
        """A stop that came before the loop (nothing new to save) or a forced one (saving was skipped)."""
        name = signal_name(signum)
        steps = self.trainer.step if self.trainer is not None else (self.ckpt.step if self.ckpt else 0)
        if forced:
            reason = f"stopped by a repeated {name} at step {steps} without saving a checkpoint"
        else:
            reason = f"stopped by {name} before training started"
        fields = {}
        if self.ckpt is not None and not forced:  # what the rows of the run being resumed say
            fields = self._fields_from_metrics(before=steps)
        self._end("interrupted", reason=reason + ".", signal=name, steps=steps, **fields)

    def _fields_from_metrics(self, before: int) -> dict[str, Any]:
        path = self.run_dir / METRICS_FILE
        if not path.is_file():
            return {}
        try:
            lines, _ = read_rows(path)
        except OSError:
            return {}
        return outcome.from_rows([json.loads(line) for line in lines], before)

    def exit_code(self) -> int:
        """The process exit code this run's ending asks for: 128 + signal number when interrupted, else 0
        (the CLI adds its own for failed and crashed runs)."""
        if self.summary.status == "interrupted" and self.summary.signal:
            return exit_code(int(signal.Signals[self.summary.signal]))
        return 0

    # ------------------------------------------------------------------------------------------------
    # building and training
    # ------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        cfg, tcfg = self.cfg, self.cfg["train"]
        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        torch.manual_seed(cfg["seed"])
        device = self.dist.device(pick_device(tcfg["device"]))
        memory.check_fits(cfg, device, self.dist.world_size)  # before anything is allocated
        if device.type == "cuda":  # TF32 tensor cores for float32 matmuls (train.peak_flops counts them)
            torch.set_float32_matmul_precision("high")
        self.summary.update(device=device_label(device))
        model = instantiate(cfg["model"]).to(device)  # before the data: a CPU user hears the step time first
        # one process only: under torchrun a forward on one rank would leave norm.sync's all-reduce unmatched
        if self.step_time and device.type == "cpu" and self.dist.world_size == 1:
            for line in step_time.cpu_lines(model, cfg):
                log.info(line)
        corpus = self._load_corpus()
        if corpus.vocab_size > cfg["model"]["vocab_size"]:
            raise InvalidConfig(
                f"model.vocab_size={cfg['model']['vocab_size']} is smaller than the tokenizer's "
                f"{corpus.vocab_size} tokens; set model.vocab_size to at least {corpus.vocab_size}.",
                "model.vocab_size",
            )
        self.summary.update(baseline_unigram_loss=baseline_unigram_loss(corpus))
        n_layers = model.n_layers
        formula = block_formula(cfg["norm"], cfg["placement"], n_layers, cfg["model"]["qk_norm"])
        z_loss = cfg["optim"]["z_loss"]
        log.info(
            "block: %s  (×%d blocks, %s parameters)%s",
            formula,
            n_layers,
            f"{model.n_params():,}",
            f"; objective: CE + {z_loss:g}·mean(log² Z)" if z_loss else "",
        )
        held = cancelled_names(model)
        if held:
            log.info(
                "norm=%s subtracts all these add, so they keep their initial values "
                "(GPT.norm_cancelled_parameters): %s",
                cfg["norm"]["name"],
                held,
            )
        self.summary.update(
            n_params=model.n_params(),
            formula=formula,
            world_size=self.dist.world_size,
            global_batch_size=tcfg["batch_size"] * tcfg["grad_accum"] * self.dist.world_size,
        )

        if self.ckpt is not None:  # before W&B: a checkpoint that does not fit is the config's fault
            checkpoint.load_model_state(model, self.ckpt)
        if (
            cfg["logger"]["name"] == "wandb" and self.dist.is_main
        ):  # only now: a run that fails before training opens no W&B run
            self.wandb = WandbSink.open(cfg, self.run_dir, self.group or self._default_group())
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
        resume_step = None
        if self.ckpt is not None:
            trainer.load_state_dict(self.ckpt.state)
            resume_step = trainer.step
            log.info("resumed from %s at step %d", self.ckpt.path, trainer.step)
            self.ckpt.state = {}  # the tensors now live in the model and the optimizer
        self.trainer = trainer
        self.summary.update(steps=trainer.step)
        with self.stop.deferred():  # from here a signal stops at the next step boundary
            result, previous = self._fit(trainer, resume_step)
            self._finish(trainer, result, previous)
            sample = self.dist.is_main and tcfg["sample_tokens"] > 0
            if result.status == "completed" and result.steps > 0 and sample:
                text = generate(
                    model, corpus, tcfg["sample_prompt"], tcfg["sample_tokens"], device, seed=cfg["seed"]
                )
                write_text_atomic(self.run_dir / SAMPLE_FILE, text + "\n")
                log.info("sample: %s", text)

    def _load_corpus(self) -> TokenCorpus:
        data, seq_len = self.cfg["data"], self.cfg["train"]["seq_len"]
        try:
            return load_corpus(data, progress=self._progress_enabled(), min_tokens=seq_len + 1)
        except CorpusTooShort as e:
            where = f" (data.path={data['path']})" if data.get("path") else ""
            raise InvalidConfig(
                f"The {e.split} split of data={data['name']}{where} has {e.n_tokens} tokens, fewer than one "
                f"window of train.seq_len={seq_len} and its next-token target; lower train.seq_len or use a "
                "longer corpus (data.path).",
                "train.seq_len",
            ) from None

    def _default_group(self) -> str:
        return str(self.cfg["experiment_name"])

    def _fit(self, trainer: Trainer, resume_step: int | None) -> tuple[LoopResult, list[dict[str, Any]]]:
        tcfg = self.cfg["train"]
        # logged where signals already wait for a step boundary (tests wait for this line)
        log.info("training from step %d to %d in %s", trainer.step, tcfg["max_steps"], self.run_dir)
        sink: JsonlSink | None = None
        callbacks: list[Callback] = []
        if self.dist.is_main:  # the rows are rank 0's to write
            sink = JsonlSink(self.run_dir / METRICS_FILE, resume_step=0 if self.restart else resume_step)
            callbacks = [
                sink,
                *([self.wandb] if self.wandb is not None else []),
                ProgressBar(tcfg["max_steps"], trainer.step, self.cfg["name"], self._progress_enabled()),
                self._checkpoints(trainer),
            ]
        result = trainer.fit(
            callbacks,
            # every rank stops at the same step, whichever of them got the signal
            stop=(lambda: self.dist.any(self.stop())) if self.dist.enabled else self.stop,
        )
        return result, sink.kept if sink is not None else []

    def _checkpoints(self, trainer: Trainer) -> Checkpoints:
        return Checkpoints(self.run_dir / CHECKPOINT_DIR, trainer.state_dict, self.cfg["model"])

    def _checkpoint(self, trainer: Trainer) -> None:
        """checkpoints/last.pt, written by rank 0 alone."""
        if self.dist.is_main:
            self._checkpoints(trainer).save(LAST)

    def _finish(self, trainer: Trainer, result: LoopResult, previous: list[dict[str, Any]]) -> None:
        """Checkpoint, then the summary: both atomic, both before anything else can go wrong."""
        self._checkpoint(trainer)
        numbers = outcome.after_training(
            previous,
            result.train_losses,
            result.val_losses.values(),
            result.tokens_per_s,
            self.cfg["train"]["flush_every"],
        )
        fields: dict[str, Any] = dict(
            status=result.status,
            steps=result.steps,
            diverged_at=result.diverged_at,
            final_val_loss=result.val_losses.get(result.steps) if result.status == "completed" else None,
            learned=did_learn(numbers["best_val_loss"], self.summary.baseline_unigram_loss),
            **numbers,
            **trainer.monitor.summary(),
        )
        fields["mfu"] = flops.mfu(fields["tokens_per_s"], trainer.flops_per_token, trainer.peak_flops)
        fields["load_avg"] = load_average()
        if result.status == "interrupted":
            name = self.stop.signal_name or "a signal"
            fields.update(
                signal=self.stop.signal_name,
                reason=f"stopped by {name} at step {result.steps}; checkpoints/{LAST} holds that step.",
                resume_command=self.resume_command(self.run_dir, str(self.run_dir)),
            )
        elif result.reason:
            fields["reason"] = result.reason
        self.write_summary(**fields)
        monitor = trainer.monitor
        if self.summary.learned is not None:
            log.info(
                "best val loss %.3f vs the corpus's unigram baseline %.3f: %s",
                self.summary.best_val_loss,
                self.summary.baseline_unigram_loss,
                "learned" if self.summary.learned else "did NOT learn (not clearly below the unigram loss)",
            )
        if monitor.spike_steps:
            log.info(
                "%d steps with a loss or grad-norm spike; reports in %s/spikes",
                len(monitor.spike_steps),
                self.run_dir,
            )
        if result.status == "diverged":
            log.warning("diverged at step %d: %s", result.diverged_at, result.reason)

    def _progress_enabled(self) -> bool:
        setting = self.cfg["train"]["progress"]
        if setting == "auto":
            return sys.stderr.isatty()
        return bool(setting)
