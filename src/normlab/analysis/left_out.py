"""What a report's numbers leave out, said before any number: runs it could not read (and why), a sweep's
jobs that have no run directory yet, and runs that have not finished (stopped, failed, or still running).

A sweep stopped half-way is exactly when a researcher wants to look, so the report is written of what is
there, and these lines say what is not.
"""

from __future__ import annotations

import math

import pandas as pd

from normlab.analysis.load import RunSet

FINISHED = ("completed", "diverged", "invalid")
SHOWN = 12  # names listed in one sentence before "and N more"


def _listed(items: list[str]) -> str:
    shown = items[:SHOWN]
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return "; ".join(shown) + more


def _steps(value: object) -> int | None:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) else None


def unfinished(rs: RunSet) -> pd.DataFrame:
    """The runs that did not reach their end: interrupted, failed, crashed, running (or died), unknown."""
    if rs.runs.empty:
        return rs.runs
    return rs.runs[~rs.runs["status"].isin(FINISHED)]


def how_far(run: str, row: pd.Series) -> str:
    """ "0_ln-pre-L1-w2-s0 (interrupted at step 518 of 3000)"."""
    steps, total = _steps(row.get("steps")), _steps(row.get("train.max_steps"))
    status = row.get("status")
    status = "running, or its process died" if status == "running" else status
    where = "" if steps is None else f" at step {steps}" + (f" of {total}" if total is not None else "")
    return f"{run} ({status}{where})"


def lines(rs: RunSet) -> list[str]:
    """The report's "Read this first" lines about what its numbers leave out (none when nothing is)."""
    out = []
    if rs.unreadable:
        items = [f"{run}: {why}" for run, why in rs.unreadable]
        out.append(
            f"{len(items)} run(s) could not be read and are left out of every number and figure — "
            f"{_listed(items)}."
        )
    for sweep, gone in rs.missing.items():
        of = f"{gone.count} of the {gone.total} jobs" if gone.total is not None else f"{gone.count} job(s)"
        which = (
            f": {_listed(gone.jobs)}"
            if gone.jobs
            else " (which ones, the normlab that ran it did not record)"
        )
        out.append(
            f"{of} of the sweep in {sweep} have no run directory yet (not started){which}; the sweep's continue "
            "command (its command with train.resume=auto) runs them."
        )
    if "rows_repeated" in rs.runs:
        repeated = rs.runs[rs.runs["rows_repeated"].fillna(0) > 0]
        if not repeated.empty:
            items = [f"{run} ({int(n)} extra rows)" for run, n in repeated["rows_repeated"].items()]
            out.append(
                f"{len(items)} run(s) have more than one training row for a step in metrics.jsonl (a row copied, "
                f"or two histories mixed): {_listed(items)}. Their curves keep the last row of each step; the "
                "Warnings section says which steps."
            )
    left = unfinished(rs)
    if not left.empty:
        items = [how_far(str(run), row) for run, row in left.iterrows()]
        out.append(
            f"{len(items)} run(s) have not finished: {_listed(items)}. Their numbers are as far as they got, "
            "not at the end of training; a sweep's continue command finishes them."
        )
    return out
