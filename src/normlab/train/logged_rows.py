"""What metrics.jsonl holds of a run, against the steps a checkpoint has trained: the steps of its training
rows (and their losses: the history they belong to), the first step without a row, the steps missing
before a checkpoint's, and the checkpoint train.resume=auto can continue (`continuable`) — so that a resume
leaves every step's row exactly once, in one history (normlab.train.run_dir.plan,
normlab.train.resume.check_rows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

METRICS_FILE = "metrics.jsonl"  # a run directory's rows, one JSON object per line (normlab.metrics.sinks)


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


def continuable(
    checkpoints: Path, losses: dict[int, object], covered: int
) -> tuple[tuple[Path, int] | None, str]:
    """The newest checkpoint in `checkpoints` that train.resume=auto can continue — whole (every byte), of
    the history metrics.jsonl holds (`losses`: never one a rewind left behind), at a step the rows cover
    (`covered`: the first step without a row) — and the clauses saying what it passed over. Each file is
    opened once and read in full (its checksums) only when it matters."""
    from normlab.train.checkpoint import CHECKPOINT_DIR, candidates, opened, same_history, whole

    every = candidates(checkpoints)
    states = {p: opened(p) for p in every}
    checked: dict[Path, bool] = {}

    def first(accept: Callable[[Path, dict], bool]) -> Path | None:
        for p in every:
            state = states[p]
            if state is not None and accept(p, state):
                if p not in checked:
                    checked[p] = whole(p)
                if checked[p]:
                    return p
        return None

    def step(p: Path) -> int:
        return int(states[p]["step"])  # type: ignore[index]

    note = ""
    found = first(lambda p, state: same_history(state, losses))
    other = first(lambda p, state: True)
    if other is not None and (found is None or step(other) > step(found)):
        note += (
            f", but {CHECKPOINT_DIR}/{other.name} (step {step(other)}) belongs to another history than "
            "metrics.jsonl's rows (its last row's loss differs), so it is not continued"
        )
    if (
        found is not None and step(found) > covered
    ):  # its rows are not all there: an older checkpoint, or none
        note += f", but metrics.jsonl has no rows for steps {describe_steps(missing_steps(list(losses), step(found)))}"
        found = first(lambda p, state: int(state["step"]) <= covered and same_history(state, losses))
        if found is not None:
            note += f", so they are trained again from {CHECKPOINT_DIR}/{found.name}"
    newer = every[: every.index(found)] if found is not None else every
    damaged = [p.name for p in newer if states[p] is None or not checked.setdefault(p, whole(p))]
    if damaged:
        note += f", but {', '.join(f'{CHECKPOINT_DIR}/{n}' for n in damaged)} cannot be read (damaged)"
    return (None if found is None else (found, step(found))), note
