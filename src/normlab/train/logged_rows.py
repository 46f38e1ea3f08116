"""What metrics.jsonl holds of a run, against the steps a checkpoint has trained: the steps of its training
rows (and their losses: the history they belong to), the first step without a row, and the steps missing
before a checkpoint's — so that a resume leaves every step's row exactly once (normlab.train.run_dir.plan,
normlab.train.resume.check_rows)."""

from __future__ import annotations

import json
from pathlib import Path

from normlab.train.run_dir import METRICS_FILE


def training_steps(directory: Path) -> list[int]:
    """The steps of metrics.jsonl's training rows (those with a loss), in file order; torn lines left out."""
    return [step for step, _ in _training_rows(directory)]


def training_losses(directory: Path) -> dict[int, object]:
    """step → loss of metrics.jsonl's training rows (the first row of a step, where one is repeated)."""
    losses: dict[int, object] = {}
    for step, loss in _training_rows(directory):
        losses.setdefault(step, loss)
    return losses


def _training_rows(directory: Path) -> list[tuple[int, object]]:
    from normlab.metrics import names
    from normlab.metrics.sinks import read_rows

    path = directory / METRICS_FILE
    try:
        lines, _ = read_rows(path)
    except OSError:
        return []
    rows = []
    for line in lines:
        row = json.loads(line)
        if names.LOSS in row:
            rows.append((int(row[names.STEP]), row[names.LOSS]))
    return rows


def rows_cover(steps: list[int]) -> int:
    """The first step without a row, counting from the first row's step (0 for a run's own rows; a run that
    continued another directory's checkpoint starts later): a checkpoint at or before it leaves no hole."""
    present = set(steps)
    step = min(present) if present else 0
    while step in present:
        step += 1
    return step


def missing_steps(steps: list[int], before: int) -> list[tuple[int, int]]:
    """The runs of steps below `before` that have no row, as (first, last) pairs, from the first row's step."""
    present = set(steps)
    start = min(present) if present else 0
    gaps: list[tuple[int, int]] = []
    for step in range(start, before):
        if step in present:
            continue
        if gaps and gaps[-1][1] == step - 1:
            gaps[-1] = (gaps[-1][0], step)
        else:
            gaps.append((step, step))
    return gaps


def describe_steps(gaps: list[tuple[int, int]]) -> str:
    """[(70, 159), (200, 200)] → "70–159 and 200"."""
    parts = [f"{a}–{b}" if b > a else str(a) for a, b in gaps]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
