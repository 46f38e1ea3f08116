"""One progress line for a sweep whose jobs run side by side (`hydra/launcher=joblib`), instead of one bar
per job overwriting the others on the terminal:

    [sweep] running: #2 rms-pre 120/200 (loss 3.41), #3 rms-post 80/200 (loss 3.90) · 2/6 done · 1.1 min elapsed, about 1.4 min left

printed by the sweep's own process every EVERY_S seconds while jobs run. Each running job's step and loss
come from the last row of its metrics.jsonl (a read of the file's tail), its length from its
`.hydra/config.yaml`; the jobs done and the time left are those of the lines each job prints as it ends
(normlab.sweep_progress: the sweep's done-file, `time_left`), so the two kinds of line agree. A job whose
summary.json says it has ended is no longer listed (its process may still be exiting), and once a signal
stops the sweep the line says so instead of a time left. The jobs themselves draw no bar and keep their own
progress lines in their train.log (normlab.train.progress).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path

from normlab.sweep_progress import (
    FINAL,
    done_count,
    duration,
    last_row,
    max_steps_of,
    read_state,
    status_of,
    time_left,
)
from normlab.sweeps.jobs import Job

EVERY_S = 30.0

__all__ = ["EVERY_S", "SweepTicker", "last_row", "max_steps_of"]


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

    def tick(
        self, running: Mapping[int, Job], done: int, now: float | None = None, stopping: bool = False
    ) -> str | None:
        """`done`: the jobs the launcher has collected, used where the sweep keeps no done-file."""
        now = time.monotonic() if now is None else now
        if now < self.next_at or not running:
            return None
        self.next_at = now + self.every_s
        line = self.line(running, done, now - self.started, stopping)
        if line is not None:
            print(line, file=self.out, flush=True)
        return line

    def line(
        self, running: Mapping[int, Job], done: int, elapsed: float, stopping: bool = False
    ) -> str | None:
        """The line for the jobs still running (None when every one of them has ended)."""
        parts, shares = [], []
        for num, job in sorted(running.items()):
            run_dir = self.run_dir(job)
            if run_dir is not None and status_of(run_dir) in (*FINAL, "interrupted"):
                continue  # ended: its own line said so, and its process is only exiting
            row = last_row(run_dir / "metrics.jsonl") if run_dir is not None else None
            name = run_dir.name.split("_", 1)[-1] if run_dir is not None else job.label
            if row is None:
                parts.append(f"#{num} {name} starting")
                shares.append(0.0)
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
            shares.append(steps / total if total else 0.0)
        if not parts:
            return None
        recorded = done_count(self.sweep_dir, self.total)
        done = min(recorded if recorded is not None else done, self.total)
        head = f"[sweep] {'stopping, saving' if stopping else 'running'}: {', '.join(parts)}"
        if stopping:
            return f"{head} · {done}/{self.total} done · {duration(elapsed)} elapsed"
        skipped = read_state(self.sweep_dir)["skipped"] if recorded is not None else 0
        seconds = time_left(elapsed, self.total, done, skipped, shares)
        left = f", about {duration(seconds)} left" if seconds is not None else ""
        return f"{head} · {done}/{self.total} done · {duration(elapsed)} elapsed{left}"
