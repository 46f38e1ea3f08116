"""summary.json's fields, each from what it is made of: the config's identity (`config_echo`), what a resume
decision records (`resume_fields`), the numbers of a run its loop ended (`loop_fields`: the loop's result
and the rows kept from before a resume) or an exception ended (`metrics_fields`: the rows metrics.jsonl
holds), and the command that continues it (`continue_command`).

Pure functions with declared inputs, so that normlab.train.run.Run reads as the order of a run's steps and
this module as what summary.json says; a stack's members (normlab.train.stacked) fill theirs the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normlab.data.unigram import did_learn
from normlab.metrics.sinks import read_rows
from normlab.train import checkpoint, diagnosis, flops, outcome
from normlab.train.callbacks import LoopResult
from normlab.train.checkpoint import CHECKPOINT_DIR
from normlab.train.loop import Trainer
from normlab.train.resume import Decision
from normlab.train.run_dir import METRICS_FILE

# Builds the command that continues a run: (run dir, train.resume value or None for a fresh start) → str.
ResumeCommand = Callable[[Path, "str | None"], str]

# A setting whose value comes from ${oc.env:…}: its key → (its value, the value as the config writes it)
Environment = Mapping[str, tuple[Any, str]]


def resolved(cfg_node: DictConfig | Mapping[str, Any]) -> dict[str, Any] | None:
    """The config as plain values, as far as it resolves (None: a value that does not, which the config
    check reports)."""
    try:
        if OmegaConf.is_config(cfg_node):
            return OmegaConf.to_container(cfg_node, resolve=True)  # type: ignore[return-value]
        return dict(cfg_node)
    except Exception:
        return None


def config_echo(cfg: Mapping[str, Any], environment: Environment) -> dict[str, Any]:
    """The config's identity in summary.json (norm, placement, depth, warm-up, seed, name); a value from the
    environment as the config writes it."""

    def pick(group: str) -> Any:
        value = cfg.get(group)
        return value.get("name") if isinstance(value, Mapping) else value

    def echo(key: str, value: Any) -> Any:
        return environment[key][1] if key in environment else value

    return dict(
        norm=echo("norm.name", pick("norm")),
        placement=echo("placement.name", pick("placement")),
        depth=echo("depth", cfg.get("depth")),
        warmup_steps=echo("warmup_steps", cfg.get("warmup_steps")),
        seed=echo("seed", cfg.get("seed")),
        name=echo("name", cfg.get("name")),
    )


def resume_fields(decision: Decision) -> dict[str, Any]:
    """What a run that continues `decision.checkpoint` records of it before training: where it resumed from,
    and the changes and holes earlier resumes of the run recorded (this resume's are added as they are
    found: `Change.record`)."""
    ckpt = decision.checkpoint
    assert ckpt is not None
    before = decision.previous or {}  # what earlier resumes of this run recorded
    return dict(
        resumed_from=f"{ckpt.path} (step {ckpt.step})",
        resume_changes=list(before.get("resume_changes") or []),
        missing_steps=[*(before.get("missing_steps") or []), *map(list, decision.missing)],
    )


def loop_fields(
    cfg: Mapping[str, Any],
    trainer: Trainer,
    result: LoopResult,
    previous: Sequence[dict[str, Any]],
    baseline_unigram_loss: float | None,
) -> dict[str, Any]:
    """The numbers of a run its loop ended (completed, diverged, interrupted at a step boundary): from the
    loop's `result`, the rows kept from before a resume (`previous`) and the trainer's monitor; and the
    likely cause of a failure to learn (normlab.train.diagnosis)."""
    losses = outcome.run_losses(list(previous), result.train_losses)
    numbers = outcome.after_training(
        list(previous),
        losses,
        result.val_losses.values(),
        result.tokens_per_s,
        cfg["train"]["flush_every"],
    )
    fields = dict(
        steps=result.steps,
        diverged_at=result.diverged_at,
        final_val_loss=result.val_losses.get(result.steps) if result.status == "completed" else None,
        learned=did_learn(numbers["best_val_loss"], baseline_unigram_loss),
        **numbers,
        **trainer.monitor.summary(),
        mfu=flops.mfu(numbers["tokens_per_s"], trainer.flops_per_token, trainer.peak_flops),
        load_avg=outcome.load_average(),
    )
    known = {"status": result.status, "baseline_unigram_loss": baseline_unigram_loss, **fields}
    note = diagnosis.cause(cfg, known, losses)
    return {**fields, "diagnosis": note.sentence if note is not None else None}


def metrics_fields(run_dir: Path, before: int) -> dict[str, Any]:
    """The numbers of the rows metrics.jsonl in `run_dir` holds for the steps before `before` (a run an
    exception ended); none where it is missing or unreadable."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return {}
    try:
        lines, _ = read_rows(path)
    except OSError:
        return {}
    return outcome.from_rows([json.loads(line) for line in lines], before)


def continue_command(
    run_dir: Path, trained: bool, resumed: bool, resume: str | None, command: ResumeCommand
) -> str | None:
    """How to continue the run in `run_dir`: from its own checkpoint if a readable one is there (always,
    after its loop saved last.pt: `trained`), else from the one it resumed (`resumed`, by `resume`); where
    every checkpoint there is damaged, with train.resume=auto, which starts the run again from step 0
    (repeating the command would fail again)."""
    own = run_dir / CHECKPOINT_DIR
    if trained or checkpoint.newest(own) is not None:
        return command(run_dir, str(run_dir))
    if checkpoint.candidates(own):
        return command(run_dir, "auto")
    if resumed:
        return command(run_dir, str(resume))
    return None
