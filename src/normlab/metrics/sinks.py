"""Where metric rows go: metrics.jsonl always (the source of truth), other loggers optionally."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _finite_or_str(value: Any) -> Any:
    # JSON has no NaN/Infinity; keep them readable and parseable as strings.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


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
        self._file.write(json.dumps({k: _finite_or_str(v) for k, v in row.items()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
