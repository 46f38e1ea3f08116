"""What the pilot's sweeps cost on this device, measured: the probe runs every sweep as the pilot will —
the same runs, packed the same way, compiled — for a few steps, and reads each run's step times from its
metrics.jsonl.

A run's rows carry `tokens_per_s` per flush window (every train.flush_every steps: one host transfer), so a
window's seconds per step are tokens a step ÷ that rate. Windows are read as:
- the first: compilation and the first evaluation — left to the fixed part;
- one holding an evaluation row (val_loss): the evaluation's time is in it — left out;
- one whose steps are all in the dense start (every step instrumented, metrics.dense_until): an
  instrumented step's time;
- one whose steps are all after it: a steady step (instrumented only every metrics.every).
A sweep's step is its slowest run's (the runs train at once; the set ends with the last), its fixed part
what the probe's wall time leaves once its steps and evaluations are taken out. That fixed part was paid
with a cold compilation cache; the pilot's own runs find it warm, so the plan errs on the long side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from normlab.analysis.load.read import read_metrics
from normlab.metrics import names
from normlab.study.pilot.figures import Shape, evaluation_s
from normlab.study.pilot.plan import DENSE_UNTIL, Schedule, SweepCost


class ProbeFailed(RuntimeError):
    """The probe's runs did not give step times (a run failed, or it was too short to have a steady window)."""


@dataclass(frozen=True)
class RunTimes:
    """One probe run's step times, in seconds."""

    steady_s: float | None  # a steady step (None: no steady window)
    instrumented_s: float | None  # an instrumented step of the dense start (None: no such window)
    windows: int


def windows(rows: Sequence[dict]) -> list[list[dict]]:
    """The rows grouped by flush window: consecutive rows that share one tokens_per_s."""
    out: list[list[dict]] = []
    for row in rows:
        rate = row.get(names.TOKENS_PER_S)
        if rate is None:
            continue
        if out and out[-1][0].get(names.TOKENS_PER_S) == rate:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def _mean(pairs: list[tuple[float, int]]) -> float | None:
    steps = sum(n for _, n in pairs)
    return sum(s * n for s, n in pairs) / steps if steps else None


def run_times(rows: Sequence[dict], tokens_per_step: int, dense_until: int = DENSE_UNTIL) -> RunTimes:
    """A run's steady and instrumented step times from its rows (module docstring)."""
    steady: list[tuple[float, int]] = []
    dense: list[tuple[float, int]] = []
    found = windows(rows)
    for window in found[1:]:
        rate = float(window[0][names.TOKENS_PER_S])
        if rate <= 0 or any(r.get(names.VAL_LOSS) is not None for r in window):
            continue
        steps = [int(r[names.STEP]) for r in window]
        seconds = tokens_per_step / rate
        if max(steps) <= dense_until:
            dense.append((seconds, len(steps)))
        elif min(steps) > dense_until:
            steady.append((seconds, len(steps)))
    return RunTimes(_mean(steady), _mean(dense), len(found))


def sweep_cost(
    run_dirs: Sequence[Path],
    wall_s: float,
    probe: Schedule,
    shape: Shape,
    waves: int = 1,
) -> SweepCost:
    """The cost of a sweep from its probe: the runs' directories, the probe sweep's wall time and schedule."""
    times = []
    for run in run_dirs:
        rows, _ = read_metrics(run)
        t = run_times(rows, shape.tokens_per_step)
        if t.steady_s is None:
            raise ProbeFailed(
                f"{run} has no steady window of steps ({t.windows} flush windows in {len(rows)} rows): the "
                "probe's runs ended before the dense start was over, or did not train"
            )
        times.append(t)
    if not times:
        raise ProbeFailed("the probe left no run directories")
    step = max(t.steady_s for t in times if t.steady_s is not None)
    extra = max(
        (t.instrumented_s - t.steady_s for t in times if t.instrumented_s and t.steady_s), default=0.0
    )
    extra = max(extra, 0.0)
    evaluation = evaluation_s(shape, step)
    trained = probe.steps * step + probe.instrumented * extra + probe.evaluations * evaluation
    return SweepCost(step, extra, evaluation, max(wall_s - waves * trained, 0.0), waves)
