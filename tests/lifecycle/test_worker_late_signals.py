"""A signal that reaches a sweep's job process after its run has ended (a second Ctrl-C the parent passes
on while the job winds down) leaves the job's answer to the parent intact: the sweep reports the job as it
ended, not as "not started" (seen once in the suite: `#0 seed=0 — not started` beside a summary.json that
said interrupted). And a stack member that ends first does not make the stack deaf to a later signal.

The late signal is made deterministic by a `sitecustomize` that, in the job's process only
(`normlab.sweeps.worker`), sends that process SIGTERM right after the run has returned — where the worker's
own "abandon the job" handler used to come back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from soak.processes import SweepProcess, env

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="watches processes through /proc"
)

BASE = (
    "model=tiny",
    "logger=none",
    "data=synthetic",
    "data.n_train_stories=200",
    "data.n_val_stories=20",
    "data.vocab_size=512",
    "depth=1",
    "train.seq_len=16",
    "train.batch_size=4",
    "train.eval_batches=1",
    "train.sample_tokens=0",
    "train.progress=false",
    "warmup_steps=2",
    "train.max_steps=6",
)

# patched where the job's run has just ended: a job alone's outcome (normlab.cli), a stack's (sweeps.stacked)
SITECUSTOMIZE = """
import os, signal, sys
if "normlab.sweeps.worker" in sys.orig_argv:
    import normlab.cli as cli
    import normlab.sweeps.stacked as stacked

    def late(real):
        def wrapped(*args, **kwargs):
            value = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            return value
        return wrapped

    cli.job_outcome = late(cli.job_outcome)
    stacked.run_stacked_jobs = late(stacked.run_stacked_jobs)
"""


def late_signal_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    environment = env()
    environment["PYTHONPATH"] = f"{site}:{environment['PYTHONPATH']}"
    return environment


@pytest.mark.parametrize("launcher", ["joblib", "stacked"])
def test_a_signal_after_the_run_ended_keeps_the_jobs_answer(tmp_path, cache_dir, launcher):
    sweep_dir = tmp_path / "sweep"
    argv = [
        "train.py",
        "-m",
        *BASE,
        f"data.cache_dir={cache_dir}",
        "seed=0,1",
        f"hydra/launcher={launcher}",
        "hydra.launcher.n_jobs=1",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    sweep = SweepProcess(argv, tmp_path / "log", late_signal_env(tmp_path))
    code, _ = sweep.wait(300)
    output = (tmp_path / "log").read_text()
    assert "received after the run ended" in output, output[-3000:]  # the signal came, and was said
    assert "not started" not in output, output[-3000:]
    assert code == 0, output[-3000:]
    for summary in sweep_dir.glob("*/summary.json"):
        assert json.loads(summary.read_text())["status"] == "completed"
    assert len(list(sweep_dir.glob("*/summary.json"))) == 2


def test_a_member_that_ends_first_leaves_the_stacks_stop_request_open(tmp_path):
    """The stack's members share one stop request: one member's final summary (it diverged) must not
    settle it, or a signal afterwards would be ignored by every member still training."""
    from normlab.train.signals import StopRequest
    from normlab.train.stacked.run import MemberRun

    for name in ("member", "alone"):
        (tmp_path / name).mkdir()
    stop = StopRequest()
    member = MemberRun({"train": {}}, tmp_path / "member", stop=stop)
    member.write_summary(status="diverged")
    assert stop.settled is None
    alone_stop = StopRequest()
    from normlab.train.run import Run

    Run({"train": {}}, tmp_path / "alone", stop=alone_stop).write_summary(status="diverged")
    assert alone_stop.settled == "diverged"  # a run alone's own request is settled by its summary
