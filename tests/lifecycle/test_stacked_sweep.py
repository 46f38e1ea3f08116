"""`hydra/launcher=stacked` end to end, as a user runs it: every member a run of its own, equal to the same
jobs run alone (`hydra/launcher=basic`); a signal saves every member; the continue command finishes the
sweep bit for bit (slow); the fault-injection soak on a stacked sweep (slow)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from soak.checks import comparable, job_dirs, step_problems, training_rows
from soak.processes import SweepProcess, env
from soak.run import soak
from soak.spec import SoakSpec

from normlab.train.loop import Trainer

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="watches processes through /proc"
)

OVERRIDES = (
    "model=tiny",
    "logger=none",
    "data=synthetic",
    "data.n_train_stories=400",
    "data.n_val_stories=40",
    "data.vocab_size=512",
    "depth=2",
    "train.seq_len=32",
    "train.batch_size=8",
    "train.eval_batches=2",
    "train.sample_tokens=4",
    "train.progress=false",
    "warmup_steps=2",
)
TIGHT = ("loss", "grad_norm", "val_loss")


def sweep_argv(sweep_dir: Path, cache_dir: Path, launcher: str, *extra: str) -> list[str]:
    """train.py's arguments for a sweep of the tests' tiny runs into `sweep_dir`."""
    return [
        "train.py",
        "-m",
        *OVERRIDES,
        f"data.cache_dir={cache_dir}",
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]


def sweep(tmp_path: Path, cache_dir: Path, name: str, launcher: str, *extra: str) -> tuple[int | None, str]:
    argv = sweep_argv(tmp_path / name, cache_dir, launcher, *extra)
    process = SweepProcess(argv, tmp_path / f"{name}.log", env())
    code, _ = process.wait(600)
    return code, (tmp_path / f"{name}.log").read_text()


def summaries(sweep_dir: Path) -> dict[str, dict]:
    return {k: json.loads((d / "summary.json").read_text()) for k, d in job_dirs(sweep_dir).items()}


@pytest.mark.slow
def test_a_stacked_sweep_writes_what_the_runs_alone_write(tmp_path, cache_dir):
    """Two seeds × two learning rates, one stack: each member's directory holds what its run alone's holds,
    its rows equal the run's within 1e-5, its checkpoint resumes a plain Trainer."""
    jobs = ("seed=0,1", "optim.lr=1e-3,3e-3", "train.max_steps=6", "train.eval_every=3")
    code, out = sweep(tmp_path, cache_dir, "stacked", "stacked", *jobs, "hydra.launcher.n_jobs=1")
    assert code == 0, out[-3000:]
    assert "stacked: jobs #0, #1, #2, #3 as one model" in out
    code, out_alone = sweep(tmp_path, cache_dir, "alone", "basic", *jobs)
    assert code == 0, out_alone[-3000:]
    stacked, alone = job_dirs(tmp_path / "stacked"), job_dirs(tmp_path / "alone")
    assert sorted(stacked) == sorted(alone) and len(stacked) == 4
    for job, run_dir in stacked.items():
        ours, theirs = run_dir, alone[job]
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        assert (ours / ".hydra" / "overrides.yaml").exists()
        a, b = training_rows(theirs), training_rows(ours)
        assert [r["step"] for r in a] == [r["step"] for r in b] and step_problems(b) == (0, 0)
        for ra, rb in zip(a, b, strict=True):
            assert set(ra) == set(rb)
            for key in ra:
                if key.startswith(TIGHT):
                    assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-8), (job, ra["step"], key)
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (theirs, ours))
        assert sb["status"] == "completed" and set(sa) == set(sb)
        assert sb["final_val_loss"] == pytest.approx(sa["final_val_loss"], rel=1e-5)
        assert sb["seed"] == sa["seed"] and sb["resume_command"] is None
        state = torch.load(ours / "checkpoints" / "last.pt", weights_only=True)
        assert set(state) == set(torch.load(theirs / "checkpoints" / "last.pt", weights_only=True))
        assert state["step"] == 6 and sorted(state["optimizer"]["state"]) == sorted(
            torch.load(theirs / "checkpoints" / "last.pt", weights_only=True)["optimizer"]["state"]
        )
    assert Trainer  # a member's last.pt is loaded by Trainer.load_state_dict in tests/test_stacked.py


@contextlib.contextmanager
def two_cores() -> Iterator[int]:
    """This process (and the sweep it starts) on two cores where the machine has them: `n_jobs: auto` then
    means two stacks at once on any machine; yields the cores the sweep will see."""
    before = os.sched_getaffinity(0)
    cores = sorted(before)[:2]
    os.sched_setaffinity(0, cores)
    try:
        yield len(cores)
    finally:
        os.sched_setaffinity(0, before)


def test_the_stacked_launcher_runs_with_its_defaults(tmp_path, cache_dir):
    """Issue 36: `n_jobs: auto` (the default) on every path — a sweep with fewer jobs than cores (each job a
    run alone in its own process, which crashed on int('auto')) and one with more (a stack beside a run
    alone): every job completes and says so in its summary.json."""
    with two_cores() as cores:
        for name, jobs in (("fewer", max(1, cores - 1)), ("more", cores + 1)):
            seeds = ",".join(str(s) for s in range(jobs))
            code, out = sweep(tmp_path, cache_dir, name, "stacked", f"seed={seeds}", "train.max_steps=3")
            assert code == 0, out[-3000:]
            found = summaries(tmp_path / name)
            assert len(found) == jobs and {s["status"] for s in found.values()} == {"completed"}, found
            assert f"[sweep] all {jobs} jobs done ({jobs} completed)" in out
    assert "stacked: jobs #0, #1 as one model" in out  # the sweep with more jobs than cores stacked two


def interrupt(
    tmp_path: Path, sweep_dir: Path, argv: list[str], signum: int, rng: random.Random, training: int = 1
) -> str:
    """The sweep signalled a random moment after `training` of its jobs have written a training row (all of
    them where every stack must be caught mid-training: a stack starts seconds after another on a busy machine)."""
    process = SweepProcess(argv, tmp_path / "signal.log", env())
    held: set[int] = set()  # processes stopped (SIGSTOP) once their first job trains, until the signal
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        trained = [d for d in sweep_dir.glob("*_*") if d.is_dir() and training_rows(d)]
        if training > 1:  # a stack that trains waits for the others: it cannot finish before the signal
            for pid in process.poll_workers():
                first = Path(f"/proc/{pid}/cmdline").read_text().split("\0")[-3].rsplit("/", 1)[-1]
                if pid not in held and any(
                    d.name.startswith(first.removesuffix(".pkl") + "_") for d in trained
                ):
                    os.kill(pid, signal.SIGSTOP)
                    held.add(pid)
        if len(trained) >= training:
            break
        assert process.proc.poll() is None, (tmp_path / "signal.log").read_text()[-3000:]
        time.sleep(0.02)
    if held:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    time.sleep(rng.uniform(0.0, 1.0) if not held else rng.uniform(0.0, 0.2))
    os.kill(process.pid, signum)
    code, _ = process.wait(300)
    output = (tmp_path / "signal.log").read_text()
    assert code == 128 + signum, output[-3000:]
    assert process.lingering() == []
    return output


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_saves_every_member_and_the_sweep_continues_bit_for_bit(tmp_path, cache_dir, signame):
    steps = 150
    jobs = (
        "seed=0,1,2",
        f"train.max_steps={steps}",
        "train.eval_every=50",
        "train.ckpt_every=50",
        "train.flush_every=1",  # every step on disk as it is made: the signal lands mid-training
        "hydra.launcher.n_jobs=1",  # one stack of three
    )
    code, out = sweep(tmp_path, cache_dir, "reference", "stacked", *jobs)
    assert code == 0, out[-3000:]
    rng = random.Random(f"{os.getpid()}-{signame}")
    sweep_dir = tmp_path / "sweep"
    argv = sweep_argv(sweep_dir, cache_dir, "stacked", *jobs)
    signum = int(signal.Signals[signame])
    output = interrupt(tmp_path, sweep_dir, argv, signum, rng)
    found = summaries(sweep_dir)
    assert len(found) == 3
    stopped_at = {s["steps"] for s in found.values()}
    assert len(stopped_at) == 1 and 0 < stopped_at.pop() < steps  # one step boundary for the whole stack
    for job, summary in found.items():
        run_dir = job_dirs(sweep_dir)[job]
        assert summary["status"] == "interrupted" and summary["signal"] == signame, summary
        state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True, mmap=True)
        rows = training_rows(run_dir)
        assert state["step"] == summary["steps"] == len([r for r in rows if "loss" in r])
        assert step_problems(rows) == (0, 0)
        assert "train.resume=" in summary["resume_command"]
    (line,) = [ln for ln in output.splitlines() if ln.startswith("continue the sweep with: ")]
    argv = shlex.split(line.removeprefix("continue the sweep with: "))[1:]
    resumed = SweepProcess(argv, tmp_path / "resume.log", env())
    code, _ = resumed.wait(600)
    assert code == 0, (tmp_path / "resume.log").read_text()[-3000:]
    reference = job_dirs(tmp_path / "reference")
    for job, run_dir in job_dirs(sweep_dir).items():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == steps
        rows = training_rows(run_dir)
        assert [r["step"] for r in rows if "loss" in r] == list(range(steps))
        assert comparable(rows) == comparable(training_rows(reference[job]))  # bit for bit


@pytest.mark.slow
def test_stacks_stopped_at_different_steps_are_restacked_and_continue_bit_for_bit(tmp_path, cache_dir):
    """Issue 39, point 8: two stacks at once (on two cores, one thread each) stop at their own steps when a
    signal comes; the continue command trains each stack again with the same members (not each job alone,
    as it did: "4 jobs in 4 processes"), so every job ends bit for bit as in an uninterrupted sweep."""
    steps = 150
    jobs = (
        "seed=0,1,2,3",
        f"train.max_steps={steps}",
        "train.eval_every=50",
        "train.flush_every=1",  # every step on disk as it is made: the signal lands mid-training
        "hydra.launcher.n_jobs=2",
    )
    with two_cores():
        code, out = sweep(tmp_path, cache_dir, "reference", "stacked", *jobs)
        assert code == 0, out[-3000:]
        assert "stacked: jobs #0, #1 as one model" in out and "stacked: jobs #2, #3 as one model" in out
        sweep_dir = tmp_path / "sweep"
        argv = sweep_argv(sweep_dir, cache_dir, "stacked", *jobs)
        rng = random.Random(f"{os.getpid()}-restack")
        output = interrupt(tmp_path, sweep_dir, argv, int(signal.SIGINT), rng, training=4)
        found = summaries(sweep_dir)
        assert len(found) == 4 and {s["status"] for s in found.values()} == {"interrupted"}, found
        (line,) = [ln for ln in output.splitlines() if ln.startswith("continue the sweep with: ")]
        resumed = SweepProcess(
            shlex.split(line.removeprefix("continue the sweep with: "))[1:], tmp_path / "resume.log", env()
        )
        code, _ = resumed.wait(600)
    log = (tmp_path / "resume.log").read_text()
    assert code == 0, log[-3000:]
    assert "4 jobs in 2 processes" in log, log[-3000:]  # the two stacks again, not four runs alone
    reference = job_dirs(tmp_path / "reference")
    for job, run_dir in job_dirs(sweep_dir).items():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == steps
        rows = training_rows(run_dir)
        assert [r["step"] for r in rows if "loss" in r] == list(range(steps))
        assert comparable(rows) == comparable(training_rows(reference[job])), job  # bit for bit


@pytest.mark.slow
def test_soak_of_a_stacked_sweep(tmp_path, cache_dir):
    """scripts/soak_sweep.py --launcher stacked at a small size: 3 jobs in one stack, 4 random faults
    (SIGINT, SIGTERM, SIGKILL to the parent, its group or the stack's process)."""
    spec = SoakSpec(
        workdir=tmp_path,
        jobs=3,
        steps=600,
        faults=4,
        delay_s=(0.5, 8.0),
        seed=os.getpid(),
        launcher="stacked",
        parallel=1,
        overrides=(*SoakSpec.overrides, f"data.cache_dir={cache_dir}"),
    )
    result = soak(spec)
    assert result.ok, result.to_json()
    # the 4 faults in the sweep, then the pairs of single runs started together (concurrent_runs) and the
    # signals just after a run and the sweep ended (after_end)
    assert result.survived == len(result.faults) == 4 + spec.concurrent_runs + spec.after_end
    # bit for bit, but for jobs a file fault sent to another step than their stack's: those train in a stack
    # of their own, within float tolerance (SoakSpec.stacked_bit_identical)
    assert result.steps_lost == 0 and result.equal + result.within_tolerance == 3


@pytest.mark.slow
def test_soak_of_a_stacked_sweep_with_history_splices_and_damaged_data(tmp_path, cache_dir):
    """Issue 39's faults on the stacked launcher: a member rewound into another history (its new last.pt
    cut short), a member's newest checkpoint with damaged tensor data. Nothing lost, nothing mixed; every
    job equal to the uninterrupted sweep — bit for bit where its stack resumed whole, within float
    tolerance where a fault sent one member to another step (it trains in a stack of its own; a stack that
    resumes whole is restacked as it was: issue 39 point 8)."""
    from soak.spec import DAMAGED_DATA, HISTORY_SPLICE

    spec = SoakSpec(
        workdir=tmp_path,
        jobs=3,
        steps=600,
        faults=5,
        file_share=0.6,
        file_kinds=(HISTORY_SPLICE, DAMAGED_DATA),
        delay_s=(2.0, 10.0),
        seed=os.getpid(),
        launcher="stacked",
        parallel=1,
        concurrent_runs=0,
        overrides=(*SoakSpec.overrides, f"data.cache_dir={cache_dir}"),
    )
    result = soak(spec)
    assert result.ok, result.to_json()
    kinds = [f.kind for f in result.faults]
    assert kinds.count("after-end-signal") == 2 and result.steps_lost == 0 and result.mislabeled == 0
    assert result.equal + result.within_tolerance == 3
