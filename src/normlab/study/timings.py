"""timings.json in OUT: what each finding's sweeps cost (wall time, the command, the machine), kept over
the sessions that worked on it, and how a duration reads in the report and on the terminal.

Its own module because two sides share the file: `reproduce` writes it while the sweeps run, the findings
report reads it to quote each finding's wall time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

TIMINGS_FILE = "timings.json"
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
