"""Where metric rows go: metrics.jsonl always (the source of truth), other loggers optionally."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def json_safe(value: Any) -> Any:
    """JSON has no NaN/Infinity: write them as the strings "nan", "inf", "-inf" (readable, parseable)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def scalar(value: Any) -> bool:
    """Whether a row value belongs in metrics.jsonl (histograms and other objects go to W&B only)."""
    return isinstance(value, int | float | str | bool) or value is None


class JsonlSink:
    """Appends one JSON object per row to metrics.jsonl, flushed as it is written.

    Resuming into an existing file first drops rows at or after the resumed step, so a restarted run
    never leaves duplicate steps.
    """

    def __init__(self, path: Path, resume_step: int | None = None) -> None:
        self.path = path
        if resume_step is not None and path.exists():
            kept = [
                line
                for line in path.read_text().splitlines()
                if line and json.loads(line)["step"] < resume_step
            ]
            path.write_text("".join(line + "\n" for line in kept))
        self._file = path.open("a", encoding="utf-8")

    def log(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps({k: json_safe(v) for k, v in row.items() if scalar(v)}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
