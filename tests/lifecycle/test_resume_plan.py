"""train.resume=auto's reading of a run directory, the matching of a sweep's jobs to their directories, the
sweep's exit code and its continue command, and the job watchdog — each on hand-made inputs."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from omegaconf import OmegaConf

from normlab.commands import sweep_command
from normlab.sweeps import watchdog
from normlab.sweeps.ending import EXIT_CRASHED, EXIT_INCOMPLETE, JobEnding, sweep_exit_code
from normlab.sweeps.jobs import Job, job_key, labels, recorded_jobs
from normlab.train import run_dir as resume


def run_dir(
    tmp_path: Path, trained_run: Path, status: str | None, steps: int = 3, keep: tuple[str, ...] = ()
) -> Path:
    """A copy of a finished 3-step run (step_000002.pt, last.pt at 3) with the given status and checkpoints."""
    d = tmp_path / "run"
    shutil.copytree(trained_run, d, ignore=shutil.ignore_patterns(".run.lock"))
    for p in (d / "checkpoints").glob("*.pt"):
        if p.name not in keep:
            p.unlink()
    if status is None:
        (d / "summary.json").unlink()
    else:
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**summary, "status": status, "steps": steps}))
    return d


def test_nothing_there_starts(tmp_path):
    plan = resume.plan(tmp_path / "absent", 3)
    assert plan.action == resume.START and plan.sentence == "not started yet: starting it"
    (tmp_path / "hydra-only" / ".hydra").mkdir(parents=True)  # Hydra wrote its config, the job never ran
    assert resume.plan(tmp_path / "hydra-only", 3).action == resume.START


def test_completed_is_skipped_unless_asked_for_more_steps(tmp_path, trained_run):
    d = run_dir(tmp_path, trained_run, "completed", keep=("last.pt",))
    assert resume.plan(d, 3).action == resume.SKIP
    more = resume.plan(d, 10)
    assert more.action == resume.RESUME and more.step == 3 and "completed 3 of now 10 steps" in more.sentence


def test_interrupted_resumes_from_last(tmp_path, trained_run):
    d = run_dir(tmp_path, trained_run, "interrupted", keep=("last.pt", "step_000002.pt"))
    plan = resume.plan(d, 10)
    assert (plan.action, plan.checkpoint.name, plan.step) == (resume.RESUME, "last.pt", 3)
    assert plan.sentence == "interrupted at step 3; resuming from checkpoints/last.pt (step 3)"


def test_a_killed_run_resumes_from_its_newest_checkpoint_or_starts_again(tmp_path, trained_run):
    d = run_dir(tmp_path, trained_run, "running", keep=("step_000002.pt",))
    plan = resume.plan(d, 10)  # its lock is free: the process that wrote `running` is gone
    assert (plan.action, plan.step) == (resume.RESUME, 2)
    assert plan.sentence == (
        "left running by a process that ended without saving (SIGKILL, out of memory, power loss); "
        "resuming from checkpoints/step_000002.pt (step 2)"
    )
    for p in (d / "checkpoints").glob("*.pt"):
        p.unlink()
    plan = resume.plan(d, 10)
    assert plan.action == resume.START and plan.sentence.endswith(
        "no checkpoint was saved, so it starts again from step 0"
    )


def test_a_damaged_last_falls_back_to_an_older_checkpoint(tmp_path, trained_run):
    d = run_dir(tmp_path, trained_run, "crashed", keep=("last.pt", "step_000002.pt"))
    (d / "checkpoints" / "last.pt").write_bytes(b"garbage")
    plan = resume.plan(d, 10)
    assert (plan.action, plan.checkpoint.name) == (resume.RESUME, "step_000002.pt")
    assert plan.sentence == (  # the damaged one named, as passed over
        "ended as crashed, but checkpoints/last.pt cannot be read (damaged); resuming from "
        "checkpoints/step_000002.pt (step 2)"
    )


def test_a_run_held_by_a_live_process_is_busy(tmp_path, trained_run):
    d = run_dir(tmp_path, trained_run, "running", keep=("last.pt",))
    with FileLock(str(d / ".run.lock")):
        assert resume.plan(d, 10).action == resume.BUSY
        assert resume.plan(d, 10, check_lock=False).action == resume.RESUME  # the run itself holds it


def test_jobs_are_known_by_their_overrides_not_their_number(tmp_path):
    a = ["model=tiny", "seed=1", "train.resume=auto", "hydra.sweep.subdir=0_x"]
    b = ["seed=1", "model=tiny"]
    assert job_key(a) == job_key(b) == ("model=tiny", "seed=1")
    for name, overrides in (("0_a", ["seed=0", "norm=ln"]), ("1_b", ["seed=1", "norm=ln"])):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(overrides))
    (tmp_path / "junk").mkdir()  # no .hydra: not a job
    found = recorded_jobs(tmp_path)
    assert found == {("norm=ln", "seed=0"): tmp_path / "0_a", ("norm=ln", "seed=1"): tmp_path / "1_b"}
    assert labels([["norm=ln", "seed=0", "x=1"], ["norm=rms", "seed=0", "x=1"]]) == ["norm=ln", "norm=rms"]


def outcome(status: str) -> JobEnding:
    return JobEnding(Job(0, []), status, status)


@pytest.mark.parametrize(
    ("statuses", "stopped_by", "code"),
    [
        (["completed", "diverged", "skipped"], None, 0),
        (["completed", "interrupted", "not started"], signal.SIGINT, 130),
        # finished: a divergence is a result, an invalid combination recorded and skipped by design
        (["completed", "invalid"], None, 0),
        (["completed", "diverged", "invalid", "skipped"], None, 0),
        (["completed", "invalid", "failed"], None, EXIT_INCOMPLETE),
        (["failed", "killed"], None, EXIT_INCOMPLETE),
        (["interrupted", "completed"], None, EXIT_INCOMPLETE),  # one job signalled, the sweep went on
        (["invalid", "crashed"], None, EXIT_CRASHED),
    ],
)
def test_the_sweep_exit_code(statuses, stopped_by, code):
    assert sweep_exit_code([outcome(s) for s in statuses], stopped_by) == code


def test_the_continue_command_repeats_the_sweep_with_its_directory_and_auto():
    config = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": "outputs/sweeps/my sweep"},
                "overrides": {
                    "task": ["norm=ln,rms", "seed=0", "train.resume=auto"],
                    "hydra": ["hydra/launcher=joblib", "hydra.mode=MULTIRUN", "hydra.sweep.dir=x"],
                },
            }
        }
    )
    assert shlex.split(sweep_command(config)) == [
        *("python", "train.py", "-m", "norm=ln,rms", "seed=0", "hydra/launcher=joblib"),
        "hydra.sweep.dir='outputs/sweeps/my sweep'",  # quoted for Hydra's grammar, then for the shell
        "train.resume=auto",
    ]


def test_a_job_whose_parent_dies_gets_sigterm(tmp_path):
    """A process watching another (its 'parent') gets SIGTERM within a second or two of that one's death."""
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "from normlab.sweeps import watchdog\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
            f"watchdog.watch({parent.pid}, watchdog.start_time({parent.pid}), poll_s=0.1)\n"
            "print('watching', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "watching"
        assert watchdog.alive(parent.pid, watchdog.start_time(parent.pid))
        parent.kill()
        parent.wait()
        t0 = time.monotonic()
        assert child.wait(timeout=10) == 42 and time.monotonic() - t0 < 5
    finally:
        for p in (parent, child):
            if p.poll() is None:
                p.kill()
                p.wait()
