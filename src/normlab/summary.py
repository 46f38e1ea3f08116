"""summary.json: the one definition of what a run directory says about how its run ended.

`RunSummary` is written at the start of every run (`status: running`) and rewritten, atomically, however the
run ends. Every field is declared here, with its meaning; `OUTCOME_FIELDS` (the fields run tables and W&B
summaries copy) and `CONFIG_ECHO_FIELDS` are derived from it. Other
modules fill fields (e.g. the monitor's spike counts); they never add undeclared ones.

This module imports neither torch nor the training code, so analysis can read summaries cheaply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.io import write_json_atomic

SUMMARY_FILE = "summary.json"

OUTCOME, ECHO, DETAIL = "outcome", "echo", "detail"


def _field(default: Any = None, *, kind: str = OUTCOME, doc: str) -> Any:
    if isinstance(default, list):
        return field(default_factory=list, metadata={"kind": kind, "doc": doc})
    return field(default=default, metadata={"kind": kind, "doc": doc})


@dataclass
class RunSummary:
    """The contents of summary.json (docs/runs.md, "What a run writes")."""

    status: str = _field(
        "running",
        doc="completed | diverged | invalid (bad config value or combination) | failed (environment problem: "
        "no network, missing data or checkpoint, no CUDA, unwritable or full disk) | interrupted (a signal) | "
        "crashed (a bug; see `traceback`) — `running` while the run is alive",
    )
    reason: str | None = _field(doc="one sentence saying why, for every status but completed")
    steps: int = _field(0, doc="optimizer updates made (the true count, also when interrupted)")
    final_train_loss: float | None = _field(
        doc="mean training loss of the last 10 steps (nats/token), across a resume"
    )
    final_val_loss: float | None = _field(doc="validation loss at the last step of a completed run")
    best_val_loss: float | None = _field(doc="lowest validation loss of any evaluation, across a resume")
    baseline_unigram_loss: float | None = _field(
        doc="validation cross-entropy (nats/token) of the unigram model of the training tokens: the "
        "'learned anything?' line"
    )
    learned: bool | None = _field(doc="best_val_loss clearly below baseline_unigram_loss")
    n_spikes: int = _field(0, doc="steps with a loss or grad-norm spike")
    spike_steps: list[int] = _field([], doc="those steps")
    n_loss_spikes: int = _field(0, doc="steps whose loss is a spike")
    n_grad_norm_spikes: int = _field(0, doc="steps whose grad_norm is a spike")
    spike_watch_start: int | None = _field(doc="first step at which the spike detector tests a value")
    diverged_at: int | None = _field(doc="step at which the divergence rule fired")
    tokens_per_s: float | None = _field(doc="training tokens per second of wall time, after start-up")
    mfu: float | None = _field(doc="model FLOPs utilisation, where the device's peak is known")
    world_size: int = _field(1, doc="processes that trained the run together (torchrun)")
    global_batch_size: int | None = _field(
        doc="sequences per optimizer step: batch_size × grad_accum × world_size"
    )
    n_params: int | None = _field(doc="trainable parameters (the tied embedding once)")
    wall_time_s: float | None = _field(doc="seconds from the start of this process's run to the summary")
    started_at: float | None = _field(
        doc="Unix time at which this process's run started: with wall_time_s, which runs trained at the "
        "same time (their tokens_per_s shared the machine)"
    )
    load_avg: float | None = _field(
        doc="the machine's 1-minute load average when training ended (os.getloadavg; None where there is "
        "none): how busy the cores were while tokens_per_s was measured"
    )
    device: str | None = _field(
        doc="what trained the run: 'cpu (2 cores, 1 torch thread)' or the CUDA device's name"
    )
    preflight: list[str] = _field(
        [],
        doc="the known failures the setup matched before training, one sentence each with the override that "
        "avoids it (normlab.train.diagnosis.preflight): tied small embeddings under Post-LN, a warm-up as long "
        "as the run, BatchNorm over a few sequences",
    )
    diagnosis: str | None = _field(
        doc="for a run that diverged or did not learn: its most likely cause, from its own config, summary and "
        "losses, with what to change (normlab.train.diagnosis.cause)"
    )
    norm: str | None = _field(kind=ECHO, doc="norm type (config `norm`)")
    placement: str | None = _field(kind=ECHO, doc="norm placement (config `placement`)")
    depth: Any = _field(kind=ECHO, doc="number of blocks (config `depth`)")
    warmup_steps: Any = _field(kind=ECHO, doc="warmup steps (config `warmup_steps`)")
    seed: Any = _field(kind=ECHO, doc="seed (config `seed`)")
    name: str | None = _field(kind=ECHO, doc="run name (config `name`)")
    formula: str | None = _field(kind=ECHO, doc="the block's formula, e.g. x ← x + Attn(LN(x))")
    signal: str | None = _field(
        kind=DETAIL, doc="the signal that interrupted the run (SIGTERM, SIGINT, SIGUSR1)"
    )
    resumed_from: str | None = _field(kind=DETAIL, doc="the checkpoint this run continued from")
    resume_changes: list[dict[str, Any]] = _field(
        [],
        kind=DETAIL,
        doc="settings a resume changed on purpose (train.resume_allow), each {step, key, was, now}: the step "
        "it continued from, the setting (or `corpus`), its value before and after",
    )
    missing_steps: list[list[int]] = _field(
        [],
        kind=DETAIL,
        doc="steps without a row in metrics.jsonl that a resume continued across on purpose "
        "(train.resume_allow=[missing_rows]), as [first, last] pairs",
    )
    resume_command: str | None = _field(
        kind=DETAIL, doc="the command that continues this run (interrupted and failed runs)"
    )
    traceback: str | None = _field(kind=DETAIL, doc="the Python traceback of a crashed run")

    def update(self, **fields: Any) -> RunSummary:
        """Set fields by name; an undeclared name is a bug (declare it above first)."""
        unknown = set(fields) - FIELD_NAMES
        if unknown:
            raise TypeError(
                f"RunSummary has no field(s) {', '.join(sorted(unknown))}; declare them in summary.py"
            )
        for key, value in fields.items():
            setattr(self, key, value)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def write(self, run_dir: str | os.PathLike[str]) -> Path:
        """Write RUN_DIR/summary.json atomically (the old file stays whole if this fails). While the run is
        `running`, room is kept on its disk for the final summary (RESERVE_FILE), given back just before
        that is written: a disk that fills up (metrics.jsonl stopped by ENOSPC) still gets the summary
        that says so, never the `running` a killed process leaves."""
        path = Path(run_dir) / SUMMARY_FILE
        if self.status != "running":
            free_room(Path(run_dir))
        write_json_atomic(path, self.to_dict())
        if self.status == "running":
            _keep_room(Path(run_dir))
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """A summary from its JSON; fields this version does not know are dropped, missing ones default."""
        return cls(**{k: v for k, v in data.items() if k in FIELD_NAMES})

    @classmethod
    def read(cls, run_dir: str | os.PathLike[str]) -> RunSummary:
        return cls.from_dict(json.loads((Path(run_dir) / SUMMARY_FILE).read_text()))


RESERVE_FILE = ".summary.reserve"
RESERVE_BYTES = 64 * 1024  # a final summary, a crash's traceback included, fits many times over


def _keep_room(run_dir: Path) -> None:
    """Best effort: a disk already too full for it is left alone, and the run goes on."""
    path = run_dir / RESERVE_FILE
    try:
        with path.open("wb") as f:
            f.write(b"\0" * RESERVE_BYTES)  # written, not sparse: the blocks are the run's
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def free_room(run_dir: Path) -> None:
    """Give back the room kept for the final summary (its write, or a refused resume that writes none)."""
    with contextlib.suppress(OSError):
        (run_dir / RESERVE_FILE).unlink(missing_ok=True)


FIELDS = dataclasses.fields(RunSummary)
FIELD_NAMES = frozenset(f.name for f in FIELDS)
# What run tables and W&B summaries carry: the outcome, and the one-sentence reason.
OUTCOME_FIELDS = tuple(f.name for f in FIELDS if f.metadata["kind"] == OUTCOME)
CONFIG_ECHO_FIELDS = tuple(f.name for f in FIELDS if f.metadata["kind"] == ECHO)
