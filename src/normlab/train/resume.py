"""`train.resume=auto`: what a run directory says to do next, in one sentence.

A run directory is in one of a few states, read from its summary.json, its lock and its checkpoints:

| state | next |
|---|---|
| nothing there yet (or only Hydra's `.hydra/`) | start |
| `completed` / `diverged` with at least `train.max_steps` steps | skip: nothing to do |
| `completed` with fewer steps than `train.max_steps` | resume from its newest checkpoint, train on |
| `interrupted` (a signal) | resume from `last.pt`; start if it stopped before saving one |
| `running` with a free lock: its process died without saving (SIGKILL, out of memory, power loss) | resume from its newest checkpoint, or start again from step 0 if it saved none |
| `failed`, `crashed`, `invalid` | the same: resume from its newest checkpoint, else start again |
| `running` with its lock held by a live process | busy: refused |

The sweep launchers (normlab.sweeps) ask this for every job before launching any, to skip finished jobs and
to say what happens to each; the run itself asks again under its own lock and acts on the answer. Starting
again in a directory that holds rows drops them first, so metrics.jsonl never has a step twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from normlab.train.run_dir import LOCK_FILE, holds_results, in_use
from normlab.train.summary import SUMMARY_FILE

AUTO = "auto"

START, SKIP, RESUME, BUSY = "start", "skip", "resume", "busy"
FINISHED = ("completed", "diverged")


@dataclass(frozen=True)
class Plan:
    """What to do with one run directory: `action` is start, skip, resume or busy; `checkpoint` and `step`
    are set for resume; `sentence` says why, for the console."""

    action: str
    sentence: str
    checkpoint: Path | None = None
    step: int | None = None
    status: str | None = None  # the summary's status before this run, None if there was none


def read_status(run_dir: Path) -> tuple[str | None, int]:
    """(summary.json's status, its steps), or (None, 0) where there is no readable summary."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None, 0
    if not isinstance(summary, dict):
        return None, 0
    return summary.get("status"), int(summary.get("steps") or 0)


def plan(run_dir: Path, max_steps: int | None, *, check_lock: bool = True) -> Plan:
    """What `train.resume=auto` does with `run_dir`. `check_lock=False` when the caller holds its lock."""
    from normlab.train.checkpoint import CHECKPOINT_DIR, newest  # here: a sweep's parent needs torch only now

    status, steps = read_status(run_dir)
    if check_lock and run_dir.is_dir() and in_use(run_dir):
        return Plan(
            BUSY,
            f"another process is running it right now (it holds {run_dir / LOCK_FILE})",
            status=status,
        )
    if status is None and not holds_results(run_dir):
        return Plan(START, "not started yet: starting it", status=None)
    found = newest(run_dir / CHECKPOINT_DIR)
    if status in FINISHED and (status == "diverged" or max_steps is None or steps >= max_steps):
        return Plan(SKIP, f"{status} ({steps} steps): skipped", status=status)
    if status in FINISHED:
        why = f"completed {steps} of now {max_steps} steps"
    elif status == "interrupted":
        why = f"interrupted at step {steps}"
    elif status in (None, "running"):
        why = "left running by a process that ended without saving (SIGKILL, out of memory, power loss)"
    else:
        why = f"ended as {status}"
    if found is None:
        return Plan(START, f"{why}; no checkpoint was saved, so it starts again from step 0", status=status)
    path, step = found
    return Plan(
        RESUME,
        f"{why}; resuming from {CHECKPOINT_DIR}/{path.name} (step {step})",
        checkpoint=path,
        step=step,
        status=status,
    )
