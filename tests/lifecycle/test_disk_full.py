"""A full disk anywhere ends a run `failed` · 2 with one sentence naming the file (issue 29, finding 6), on a
real small file system: torch's own writer meets ENOSPC while writing a checkpoint, and a metrics row meets it
on the way to metrics.jsonl. A tmpfs is mounted for each test, which needs root (CI runs as root); elsewhere
the tests skip, and tests/lifecycle/test_errors_table.py still drives torch.save into a full file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the block (skips the test where none can be mounted)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8); CI runs as root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_full_disk_while_writing_a_checkpoint(train_cli, tmp_path):
    """The issue's case: a 2 MB tmpfs and train.ckpt_every=50 — step_000050.pt fits, step_000100.pt does not."""
    with small_filesystem(tmp_path / "small", "2m") as disk:
        run = disk / "run"
        result = train_cli("train.max_steps=200", "train.ckpt_every=50", run_dir=run)
        assert result.code == 2 and "Traceback" not in result.output, result.output[-3000:]
        said = next(line for line in result.output.splitlines() if line.startswith("error: "))
        assert said.startswith(
            f"error: Could not write {run}/checkpoints/step_000100.pt (No space left on device)"
        )
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "failed" and "step_000100.pt" in summary["reason"]
        steps = [r["step"] for r in rows(run) if "loss" in r]
        assert steps == list(range(len(steps))) and len(steps) >= 100  # every row whole, none twice
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000050.pt"]  # no temp file
        # the printed command continues from step 50 once there is room
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        again = train_cli("train.max_steps=200", "train.ckpt_every=50", "train.resume=auto", run_dir=run)
        assert again.code == 0, again.output[-3000:]
        assert [r["step"] for r in rows(run) if "loss" in r] == list(range(200))


def test_a_full_disk_while_writing_metrics(train_cli, tmp_path):
    """Issue 39, point 10: on main the summary.json stayed `running` (no room left to write the final one),
    and train.resume=auto then blamed "SIGKILL, out of memory, power loss"; the run keeps room for it."""
    with small_filesystem(tmp_path / "small", "160k") as disk:
        run = disk / "run"
        result = train_cli("train.max_steps=2000", "train.flush_every=1", "train.ckpt_every=0", run_dir=run)
        assert result.code == 2 and "Traceback" not in result.output, result.output[-3000:]
        assert f"Could not write {run}/metrics.jsonl (No space left on device)" in result.output
        lines = (run / "metrics.jsonl").read_text().splitlines()
        whole = []
        for line in lines:
            with contextlib.suppress(ValueError):
                whole.append(json.loads(line)["step"])
        assert whole == list(range(len(whole))) and len(lines) - len(whole) <= 1  # at most the torn last row
        summary = json.loads((run / "summary.json").read_text())
        assert (
            summary["status"] == "failed" and "metrics.jsonl (No space left on device)" in summary["reason"]
        )
        assert not (run / ".summary.reserve").exists()
        from normlab.train.run_dir import plan

        said = plan(run, 2000).sentence  # what train.resume=auto says of it
        assert "ended as failed (Could not write" in said and "No space left on device" in said, said
        assert "SIGKILL" not in said
