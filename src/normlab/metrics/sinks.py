"""Where metric rows go: metrics.jsonl always (the source of truth), other loggers optionally."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from normlab.io import json_safe, write_text_atomic

__all__ = ["JsonlSink", "RowSink", "json_safe", "scalar"]

log = logging.getLogger("normlab")


def scalar(value: Any) -> bool:
    """Whether a row value belongs in metrics.jsonl (histograms and other objects go to W&B only)."""
    return isinstance(value, int | float | str | bool) or value is None


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's scalars as JSON takes them (`json_safe` of each `scalar`): a row's values are almost all
    plain finite floats and ints, which pass unchanged without a call each (a stack writes one row per
    member per step)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        kind = type(value)
        if (
            (kind is float and math.isfinite(value))
            or kind is int
            or kind is str
            or kind is bool
            or value is None
        ):
            out[key] = value
        elif scalar(value):
            out[key] = json_safe(value)
    return out


def read_rows(path: Path) -> tuple[list[str], int]:
    """(the parseable lines of a metrics.jsonl, how many were not): a process killed mid-write can leave a
    torn last line, which is dropped rather than failing the next run."""
    lines, torn = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            lines.append(line)
        else:
            torn += 1
    return lines, torn


def once_each(lines: list[str]) -> tuple[list[str], list[int]]:
    """The rows with each step's training row and evaluation row once (the first in file order: a row copied
    or appended again is dropped), and the steps of the rows dropped."""
    seen: set[tuple[int, bool, bool]] = set()
    kept, dropped = [], []
    for line in lines:
        row = json.loads(line)
        key = (int(row["step"]), "loss" in row, "val_loss" in row)
        if key in seen:
            dropped.append(key[0])
            continue
        seen.add(key)
        kept.append(line)
    return kept, dropped


class RowSink:
    """A sink as a training-loop callback (normlab.train.callbacks): training and evaluation rows go to
    `log`; `on_end` does nothing unless a sink overrides it."""

    def log(self, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def on_step(self, row: dict[str, Any]) -> None:
        self.log(row)

    def on_eval(self, row: dict[str, Any]) -> None:
        self.log(row)

    def on_checkpoint(self, step: int) -> None:
        return None

    def on_end(self, result: Any) -> None:
        return None


class JsonlSink(RowSink):
    """Appends one JSON object per row to metrics.jsonl, flushed as it is written (fsynced on close).

    Resuming into an existing file first drops rows at or after the resumed step (rewriting the file
    atomically), so a restarted run never leaves duplicate steps; `kept` holds the rows that stay. `mark`
    is added to the first row written (where a resume changed something: names.RESUME_CHANGED, ...). A
    failed write (a full disk) raises the OSError with the file's name.
    """

    def __init__(
        self, path: Path, resume_step: int | None = None, mark: Mapping[str, Any] | None = None
    ) -> None:
        self.path = path
        self.kept: list[dict[str, Any]] = []
        self.mark = dict(mark or {})
        if resume_step is not None and path.exists():
            lines, torn = read_rows(path)
            kept, repeated = once_each([line for line in lines if json.loads(line)["step"] < resume_step])
            if torn:
                log.warning("%s: dropped %d unreadable line(s) (a write cut short)", path, torn)
            if repeated:
                log.warning(
                    "%s: dropped %d repeated row(s) of step(s) %s, kept the first of each (a step has one row)",
                    path,
                    len(repeated),
                    ", ".join(str(s) for s in sorted(set(repeated))[:10]),
                )
            write_text_atomic(path, "".join(line + "\n" for line in kept))
            self.kept = [json.loads(line) for line in kept]
        self._file = path.open("a", encoding="utf-8")

    def log(self, row: dict[str, Any]) -> None:
        if self.mark:
            row, self.mark = {**row, **self.mark}, {}
        try:
            self._file.write(json.dumps(_plain(row)) + "\n")
            self._file.flush()
        except OSError as e:  # e.g. the disk is full: say which file
            raise OSError(e.errno, e.strerror, str(self.path)) from e

    def on_end(self, result: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(self.path)) from e
        finally:
            with contextlib.suppress(OSError):  # a full disk fails the flush inside close() again
                self._file.close()
