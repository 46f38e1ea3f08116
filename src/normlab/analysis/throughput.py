"""The context of measured throughput. A run's tokens/s depends on what shared the machine with it (other
runs of the sweep, other processes: the load) and on the device, often more than on the norm: two variants
trained side by side on a busy machine can come out in either order. So every tokens/s a report shows
carries that context — how many of the runs trained at the same time, the load, the device — and is never
a speed comparison between variants: the benchmark scripts, which time variants interleaved in one
process, are (docs/performance.md).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

BENCH_COMMAND = "python scripts/bench_norm_op.py"  # RMSNorm vs LayerNorm, interleaved in one process


def _intervals(runs: pd.DataFrame) -> pd.DataFrame:
    """Start and end (Unix time) of each run that recorded them."""
    if "started_at" not in runs or "wall_time_s" not in runs:
        return pd.DataFrame(columns=["start", "end"])
    start = pd.to_numeric(runs["started_at"], errors="coerce")
    end = start + pd.to_numeric(runs["wall_time_s"], errors="coerce")
    return pd.DataFrame({"start": start, "end": end}).dropna()


def ran_beside(runs: pd.DataFrame) -> pd.Series:
    """For each run, how many other runs of these trained during some part of it (NA where not recorded)."""
    spans = _intervals(runs)
    out = pd.Series(pd.NA, index=runs.index, dtype="Int64")
    for run, (start, end) in spans.iterrows():
        others = spans.drop(index=run)
        out[run] = int(((others["start"] < end) & (others["end"] > start)).sum())
    return out


def most_at_once(runs: pd.DataFrame) -> int | None:
    """The largest number of these runs that trained at the same moment (None where not recorded)."""
    spans = _intervals(runs)
    if spans.empty:
        return None
    events = sorted(
        [(s, 1) for s in spans["start"]] + [(e, -1) for e in spans["end"]], key=lambda x: (x[0], x[1])
    )
    now = peak = 0
    for _, change in events:
        now += change
        peak = max(peak, now)
    return peak


def _span(values: pd.Series, fmt: str = "{:.1f}") -> str:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return ""
    lo, hi = float(v.min()), float(v.max())
    return fmt.format(lo) if math.isclose(lo, hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def throughput_note(runs: pd.DataFrame) -> str:
    """One sentence of context for a tokens/s column over `runs`, and what it is not."""
    trained = (
        runs[pd.to_numeric(runs.get("tokens_per_s"), errors="coerce").notna()]
        if "tokens_per_s" in runs
        else runs
    )
    context = []
    at_once = most_at_once(trained)
    if at_once is not None:
        context.append(f"up to {at_once} of these runs training at the same time")
    load = _span(trained["load_avg"]) if "load_avg" in trained else ""
    if load:
        context.append(f"1-minute load average {load} when they ended")
    devices = sorted({str(d) for d in trained["device"].dropna()}) if "device" in trained else []
    if devices:
        context.append("on " + " and ".join(devices))
    measured = (
        "tokens/s: as each run measured it, " + ", ".join(context)
        if context
        else "tokens/s: as each run measured it; when, beside which other jobs and at what load is not "
        "recorded (runs written before normlab recorded it)"
    )
    return (
        f"{measured}. Throughput measured side by side depends on the neighbours and the load as much as on "
        "the model, so it is context, not a speed comparison between variants: for that, the benchmark "
        f"scripts time variants interleaved in one process (`{BENCH_COMMAND}` for RMSNorm vs LayerNorm)."
    )


def load_text(value: object) -> str:
    """A run's load average for a table cell ('–' where not recorded)."""
    v = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return "–" if pd.isna(v) or not np.isfinite(v) else f"{float(v):.1f}"
