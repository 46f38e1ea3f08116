"""The one command that uploads an offline W&B run, however many times it was resumed.

A resumed run logs on under the W&B run id its directory keeps (normlab.metrics.wandb_sink). Offline, each
process writes a fragment of its own, `RUN_DIR/wandb/offline-run-TIME-ID/` (its `resumed` flag False and
W&B's own `_step` counting from 0 again: an offline process cannot know the run exists). Plain `wandb sync`
of several fragments with one id is not documented to join them (wandb/wandb#3841, #5865); `wandb beta sync
--id ID` is, as W&B's CLI help says of `--id`: files synced with it "in order of start time", "intended to
work with syncing multiple resumed fragments of the same run". So the line an offline run prints names every
fragment of its run, in order (`sync_command`): `wandb sync FRAGMENT` for one, `wandb beta sync --id ID -p
PROJECT FRAGMENT…` for several.

Checked here without a server (tests/metrics/test_wandb.py): the fragments share the id, each holds only
its own steps (our `step` key, the x axis of every chart, runs on across them), and `wandb beta sync
--dry-run` accepts the command and lists every fragment. Not checked without a server: the upload itself,
and how W&B's UI shows the joined history (W&B's `_step` of a later fragment).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def fragments(run_dir: Path, run_id: str) -> list[Path]:
    """The offline fragments of W&B run `run_id` in `run_dir` (one per process that logged to it: a run
    and each of its resumes), oldest first: W&B names each folder offline-run-YYYYMMDD_HHMMSS-ID, with
    -N appended where a folder of that second exists already."""
    pattern = re.compile(rf"offline-run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = []
    for p in (Path(run_dir) / "wandb").glob("offline-run-*"):
        m = pattern.fullmatch(p.name)
        if m and p.is_dir():
            found.append(((m.group(1), int(m.group(2) or 0)), p))
    return [p for _, p in sorted(found)]


def sync_command(parts: list[Path], run_id: str, project: str, entity: str | None = None) -> str:
    """The one command that uploads every fragment of one offline W&B run: `wandb sync` for a single
    fragment; for several, `wandb beta sync --id`, which syncs them in order of start time as one run (what
    W&B documents for resumed fragments; see the module docstring)."""
    paths = [str(p) for p in parts]
    if len(paths) == 1:
        return shlex.join(["wandb", "sync", *paths])
    owner = ["-e", entity] if entity else []
    return shlex.join(["wandb", "beta", "sync", "--id", run_id, "-p", project, *owner, *paths])
