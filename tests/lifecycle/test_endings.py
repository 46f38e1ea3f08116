"""How a run ends, on hand-made inputs: what each exception means for summary.json's status, and the run
directory's refusals, each sentence the same before Hydra writes and when the run starts."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from normlab.errors import InvalidConfig, UserError
from normlab.train.callbacks import LoopResult
from normlab.train.outcome import ending_of, loop_ending
from normlab.train.run_dir import LOCK_FILE, RunDirectory, run_problem
from normlab.train.signals import Interrupted


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (InvalidConfig("train.lr=-1 is not positive; set it above 0.", "train.lr"), "invalid"),
        (UserError("No data; point data.path at it."), "failed"),
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/last.pt"), "failed"),
        (MemoryError(), "failed"),
        (torch.OutOfMemoryError("CUDA out of memory"), "failed"),
        (OSError(errno.EBADF, os.strerror(errno.EBADF)), "crashed"),  # not the disk: a bug
        (ZeroDivisionError("a bug"), "crashed"),
        (KeyboardInterrupt(), "interrupted"),
    ],
)
def test_each_exception_ends_a_run_with_its_status(exc, status):
    ending = ending_of(exc, steps=7)
    assert ending.status == status and ending.reason
    assert (ending.traceback is not None) == (status == "crashed")


def test_the_sentences_of_an_ending():
    full = ending_of(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/last.pt"), steps=0)
    assert full.reason.startswith("Could not write /x/last.pt (No space left on device); free some space")
    bug = ending_of(ZeroDivisionError("a bug"), steps=0)
    assert bug.reason == "ZeroDivisionError: a bug" and "ZeroDivisionError" in bug.traceback
    early = ending_of(Interrupted(signal.SIGTERM), steps=3)
    assert (early.reason, early.signal, early.forced) == (
        "stopped by SIGTERM before training started.",
        "SIGTERM",
        False,
    )
    forced = ending_of(Interrupted(signal.SIGINT, forced=True), steps=3)
    assert forced.reason == "stopped by a repeated SIGINT at step 3 without saving a checkpoint."
    assert forced.forced and ending_of(KeyboardInterrupt(), steps=0).signal == "SIGINT"


def test_the_loop_ends_a_run_as_it_says():
    assert loop_ending(LoopResult(5, "completed"), None).reason is None
    diverged = loop_ending(LoopResult(5, "diverged", diverged_at=4, reason="loss is NaN."), None)
    assert (diverged.status, diverged.reason) == ("diverged", "loss is NaN.")
    stopped = loop_ending(LoopResult(5, "interrupted"), "SIGUSR1")
    assert (stopped.reason, stopped.signal) == (
        "stopped by SIGUSR1 at step 5; checkpoints/last.pt holds that step.",
        "SIGUSR1",
    )


def test_a_directory_in_use_is_refused_with_one_sentence_before_and_at_the_start(tmp_path: Path):
    with FileLock(str(tmp_path / LOCK_FILE)):  # what a live run holds
        before = run_problem(tmp_path, None)
        with pytest.raises(UserError) as at_start:
            RunDirectory(tmp_path).acquire()
    assert before == str(at_start.value)
    assert before == (
        f"Another run is using {tmp_path} right now (it holds .run.lock); wait for it to end, or point "
        "hydra.run.dir somewhere else."
    )
    assert run_problem(tmp_path, None) is None  # the lock is free again and nothing was trained there


def test_a_file_in_the_way_and_an_earlier_run_are_refused(tmp_path: Path):
    (tmp_path / "a-file").write_text("")
    assert "a-file is a file" in run_problem(tmp_path / "a-file" / "run", None)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    (run / "summary.json").write_text('{"status": "completed", "steps": 3}')
    said = run_problem(run, None)
    assert said.startswith(
        f"{run} already holds a run (status: completed); continue it with train.resume=auto"
    )
    assert run_problem(run, "auto") is None and run_problem(run, str(run)) is None
