"""One progress line for a sweep whose jobs run side by side (`hydra/launcher=joblib`), instead of one bar
per job overwriting the others on the terminal:

    [sweep] running: #2 rms-pre 120/200 (loss 3.41), #3 rms-post 80/200 (loss 3.90) · 2/6 done · 1.1 min elapsed, about 1.4 min left

printed by the sweep's own process every EVERY_S seconds while jobs run. Each running job's step and loss
come from the last row of its metrics.jsonl (a read of the file's tail), its length from its
`.hydra/config.yaml`; the time left is the time spent so far scaled by the work left (finished jobs count
whole, running ones by their share of steps). The jobs themselves draw no bar and keep their own progress
lines in their train.log (normlab.train.progress).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

from normlab.sweep_progress import duration
from normlab.sweeps.jobs import Job

EVERY_S = 30.0
TAIL_BYTES = 8192


def last_row(metrics: Path) -> dict | None:
    """The last whole row of a metrics.jsonl, reading only its tail."""
    try:
        with metrics.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        with contextlib.suppress(ValueError):
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                return row
    return None


def max_steps_of(run_dir: Path) -> int | None:
    with contextlib.suppress(OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return int(yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["train"]["max_steps"])
    return None


class SweepTicker:
    """Prints the sweep line (module docstring) when `tick` is called and EVERY_S have passed."""

    def __init__(self, sweep_dir: Path, total: int, every_s: float = EVERY_S, out=None) -> None:
        self.sweep_dir, self.total, self.every_s = sweep_dir, total, every_s
        self.out = out if out is not None else sys.stderr
        self.started = time.monotonic()
        self.next_at = self.started + every_s
        self.max_steps: dict[int, int | None] = {}

    def run_dir(self, job: Job) -> Path | None:
        if job.run_dir is not None:
            return job.run_dir
        found = sorted(self.sweep_dir.glob(f"{job.num}_*"))  # hydra.sweep.subdir: ${hydra.job.num}_${name}
        return found[0] if len(found) == 1 else None

    def tick(self, running: Mapping[int, Job], done: int, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        if now < self.next_at or not running:
            return None
        self.next_at = now + self.every_s
        line = self.line(running, done, now - self.started)
        print(line, file=self.out, flush=True)
        return line

    def line(self, running: Mapping[int, Job], done: int, elapsed: float) -> str:
        parts, share, done = [], 0.0, min(done, self.total)
        for num, job in sorted(running.items()):
            run_dir = self.run_dir(job)
            row = last_row(run_dir / "metrics.jsonl") if run_dir is not None else None
            name = run_dir.name.split("_", 1)[-1] if run_dir is not None else job.label
            if row is None:
                parts.append(f"#{num} {name} starting")
                continue
            if num not in self.max_steps and run_dir is not None:
                self.max_steps[num] = max_steps_of(run_dir)
            total = self.max_steps.get(num)
            # a training row at step s: s + 1 updates made; an evaluation row at step s: s (never past the end)
            steps = row["step"] + 1 if "loss" in row else row["step"]
            steps = min(steps, total) if total else steps
            loss = f" (loss {row['loss']:.2f})" if isinstance(row.get("loss"), float) else ""
            parts.append(
                f"#{num} {name} {steps}/{total}{loss}" if total else f"#{num} {name} step {steps}{loss}"
            )
            if total:
                share += min(steps / total, 1.0)
        finished = done + share
        left = (
            f", about {duration(elapsed * (self.total - finished) / finished)} left" if finished > 0 else ""
        )
        return f"[sweep] running: {', '.join(parts)} · {done}/{self.total} done · {duration(elapsed)} elapsed{left}"
