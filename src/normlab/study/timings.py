"""timings.json in OUT: what each finding's sweeps cost (wall time, the command, the machine), kept over
the sessions that worked on it (`combined`: a continued finding's seconds added to those already spent,
including the unfinished seconds of sessions that stopped), the machine they were measured on, and how
a duration reads in the report and on the terminal.

Its own module because two sides share the file: `reproduce` writes it while the sweeps run, the findings
report reads it to quote each finding's wall time.
"""

from __future__ import annotations

import json
import math
import os
import platform
from pathlib import Path
from typing import Any

TIMINGS_FILE = "timings.json"
STARTED = "started"  # timings.json: the command each finding's sweep was started with, before it ends
# timings.json: the seconds spent on each finding by sessions that ended before it did (a stop, a crash,
# a machine taken back), kept up to date while a sweep runs (every preset_sweep.TICK_S seconds)
UNFINISHED = "unfinished"
MEASURE_S = "measure_s"  # a timing record's seconds spent on the finding's measurements ("profile_s" before)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def load_timings(out: Path) -> dict[str, Any]:
    path = out / TIMINGS_FILE
    if path.is_file():
        return json.loads(path.read_text())
    return {"findings": {}, "sessions": []}


def save_timings(out: Path, timings: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / TIMINGS_FILE).write_text(json.dumps(timings, indent=2) + "\n")


def combined(
    current: dict[str, Any], earlier: dict[str, Any] | None, unfinished: dict[str, Any]
) -> dict[str, Any]:
    """A finding's timing record over every session that worked on it: a continued sweep's seconds are
    added to the seconds already spent (`earlier`, the record of a session that finished it with the same
    command, and `unfinished`, the seconds and number of sessions that stopped before it ended), so a report
    never quotes a resume's few seconds as what the finding cost. The parts (calibration, perturbed sweep)
    add up the same way; time from unfinished sessions counts in the total only, as its parts are unknown."""
    unfinished_s, unfinished_n = unfinished.get("wall_s", 0.0), unfinished.get("sessions", 0)
    if earlier is None and unfinished_n == 0:
        return current
    record = dict(current)
    record["sessions"] = (earlier.get("sessions", 1) if earlier else 0) + unfinished_n + 1
    record["wall_s"] = round(current["wall_s"] + (earlier or {}).get("wall_s", 0.0) + unfinished_s, 1)
    if earlier is None:
        return record
    record["started"] = earlier.get("started", current.get("started"))
    for key in ("sweep_s", MEASURE_S):
        if key in current and key in earlier:
            record[key] = round(current[key] + earlier[key], 1)
    for part in ("calibration", "perturbed"):
        if part in current and part in earlier:
            record[part] = {
                **current[part],
                "wall_s": round(current[part]["wall_s"] + earlier[part]["wall_s"], 1),
            }
    return record


def machine() -> dict[str, Any]:
    """What the timings were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": cores,
        "memory_gib": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_avg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
