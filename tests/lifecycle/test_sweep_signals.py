"""Signals to a parallel sweep (`hydra/launcher=joblib`), sent from outside as a user or a scheduler sends them,
and the sweep-resume command afterwards; the fault-injection soak at a small size (slow).

What each signal test checks, at a random moment once the first jobs train: the sweep's parent exits with
128 + N; every job that was running is `interrupted` with a `last.pt` holding exactly the steps its
summary.json and metrics.jsonl say; the job that was waiting never started; no job process started after
the signal and none is alive 10 s after the parent.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import time
from pathlib import Path

import pytest
import torch
from soak.checks import comparable, job_dirs, mislabeled, step_problems, training_rows
from soak.faults import damage_a_file, fault_delays, fault_plan
from soak.processes import GRACE_S, SweepProcess, env, now_ticks
from soak.run import soak
from soak.spec import SoakSpec

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="watches processes through /proc"
)

SPEC_OVERRIDES = (
    "model=tiny",
    "logger=none",
    "data=synthetic",
    "data.n_train_stories=400",
    "data.n_val_stories=40",
    "data.vocab_size=512",
    "depth=2",
    "train.seq_len=32",
    "train.batch_size=8",
    "train.eval_every=0",
    "train.eval_batches=2",
    "train.sample_tokens=0",
    "train.progress=false",
    "warmup_steps=5",
)


def spec(tmp_path: Path, cache_dir: Path, jobs: int, steps: int, **kw) -> SoakSpec:
    return SoakSpec(
        workdir=tmp_path,
        jobs=jobs,
        steps=steps,
        overrides=(*SPEC_OVERRIDES, f"data.cache_dir={cache_dir}"),
        **kw,
    )


def wait_training(sweep: SweepProcess, sweep_dir: Path, n: int, timeout: float = 240) -> None:
    """Until `n` jobs have written training rows (their processes are then in the loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweep.poll_workers()
        if sum(1 for d in job_dirs_or_glob(sweep_dir) if training_rows(d)) >= n:
            return
        assert sweep.proc.poll() is None, "the sweep ended before its jobs trained"
        time.sleep(0.05)
    raise AssertionError(f"{n} jobs were not training after {timeout} s")


def wait_until(sweep: SweepProcess, condition, what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert sweep.proc.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.01)


def job_processes(sweep: SweepProcess, pickle_name: str) -> list[int]:
    """The running job processes whose command line names the job's pickle (`0.pkl` is job #0)."""
    running = sweep.poll_workers()
    return [p for p in running if f"{os.sep}{pickle_name}" in Path(f"/proc/{p}/cmdline").read_text()]


def job_dirs_or_glob(sweep_dir: Path) -> list[Path]:
    return [p for p in sweep_dir.glob("*_*") if p.is_dir()]


def by_seed(sweep_dir: Path) -> dict[int, Path]:
    return {json.loads((d / "summary.json").read_text())["seed"]: d for d in job_dirs(sweep_dir).values()}


def summaries(sweep_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}


@pytest.mark.parametrize(
    ("signame", "target"),
    [
        ("SIGINT", "group"),  # Ctrl-C pressed twice: the default suite's case; the others are slow
        pytest.param("SIGTERM", "group", marks=pytest.mark.slow),
        pytest.param("SIGINT", "parent", marks=pytest.mark.slow),
        pytest.param("SIGTERM", "parent", marks=pytest.mark.slow),
    ],
)
def test_a_signal_stops_every_running_job_saved_and_starts_none(tmp_path, cache_dir, signame, target):
    rng = random.Random(f"{os.getpid()}-{signame}-{target}")
    s = spec(tmp_path, cache_dir, jobs=3, steps=100_000)  # never reached: each job trains until the signal
    sweep_dir = tmp_path / "sweep"
    sweep = SweepProcess(
        [*s.argv(sweep_dir, resume=False), "train.flush_every=100000"], tmp_path / "log", env()
    )
    wait_training(sweep, sweep_dir, 2)
    time.sleep(rng.uniform(0.0, 1.5))  # a random moment of training
    signum = int(signal.Signals[signame])
    sent_at = now_ticks()
    sweep.send(signum, target, rng)
    if target == "group":  # Ctrl-C pressed twice: the second is passed on while the jobs save, harmlessly
        time.sleep(rng.uniform(0.0, 0.3))
        sweep.send(signum, target, rng)
    code, late = sweep.wait(240, watch_started_after=sent_at)
    output = (tmp_path / "log").read_text()
    if target == "group":
        assert f"{signame} received again: passed on to" in output, output[-3000:]
    assert code == 128 + signum, output[-3000:]
    assert late == [], f"job processes started after the signal: {late}"
    assert sweep.lingering(GRACE_S) == [], "job processes alive 10 s after the parent"
    assert "Traceback" not in output, output[-3000:]
    found = summaries(sweep_dir)
    assert sorted(found) == ["0_ln-pre-L2-w5-s0", "1_ln-pre-L2-w5-s1"], found  # job 2 never started
    for name, summary in found.items():
        assert summary["status"] == "interrupted" and summary["signal"] == signame, summary
        state = torch.load(sweep_dir / name / "checkpoints" / "last.pt", weights_only=True, mmap=True)
        steps = [r["step"] for r in training_rows(sweep_dir / name) if "loss" in r]
        assert state["step"] == summary["steps"] == len(steps) > 0 and step_problems(
            training_rows(sweep_dir / name)
        ) == (0, 0)
    assert f"[sweep] stopped by {signame}: 2 interrupted, 1 not started" in output
    assert "#2 seed=2 — not started" in output
    # the jobs' own lines after the stop give no time left, and an interrupted job is not done
    stopped = [ln for ln in output.splitlines() if ln.startswith("[sweep] ") and " interrupted · " in ln]
    assert len(stopped) == 2, output[-3000:]
    assert all(ln.startswith("[sweep] 0/3 done") and ln.endswith("; the sweep is stopping") for ln in stopped)
    (command,) = [ln for ln in output.splitlines() if ln.startswith("continue the sweep with: ")]
    assert command.endswith(f"hydra.sweep.dir={sweep_dir} train.resume=auto"), command


@pytest.mark.slow
def test_the_sweep_resume_command_finishes_an_interrupted_sweep_bit_for_bit(tmp_path, cache_dir):
    """A job's process killed with SIGKILL after its first step checkpoint, then SIGTERM to the sweep while
    another job trains and a third waits; the printed command, its values reordered, finishes the sweep:
    every job completed, every step once, every row equal to an uninterrupted sweep's."""
    steps = 200
    s = spec(tmp_path, cache_dir, jobs=3, steps=steps, ckpt_every=10)
    reference = SweepProcess(s.argv(tmp_path / "reference", resume=False), tmp_path / "ref.log", env())
    assert reference.wait(600)[0] == 0, (tmp_path / "ref.log").read_text()[-3000:]

    sweep_dir = tmp_path / "sweep"
    sweep = SweepProcess([*s.argv(sweep_dir, resume=False), "train.flush_every=1"], tmp_path / "log", env())
    # Each job is held (SIGSTOP) once it is where the test needs it: the jobs' processes start seconds apart on
    # a busy machine, so the victim could otherwise finish before the other trains, or the other before the stop.
    victim, other_dir = sweep_dir / "0_ln-pre-L2-w5-s0", sweep_dir / "1_ln-pre-L2-w5-s1"
    wait_until(
        sweep, lambda: (victim / "checkpoints" / "step_000010.pt").exists(), "job 0's first checkpoint"
    )
    (killed,) = job_processes(sweep, "0.pkl")
    os.kill(killed, signal.SIGSTOP)
    wait_until(sweep, lambda: bool(training_rows(other_dir)), "job 1 training")
    (other,) = job_processes(sweep, "1.pkl")
    os.kill(other, signal.SIGSTOP)
    assert len(training_rows(victim)) < steps and len(training_rows(other_dir)) < steps
    os.kill(killed, signal.SIGKILL)
    time.sleep(0.1)
    os.kill(sweep.pid, signal.SIGTERM)
    time.sleep(0.1)
    os.kill(other, signal.SIGCONT)  # it now finds the sweep's stop waiting for it
    code, _ = sweep.wait(240)
    output = (tmp_path / "log").read_text()
    assert code == 143, output[-3000:]
    assert "#0 seed=0 — killed: its process ended by SIGKILL without saving" in output, output[-2000:]
    assert json.loads((victim / "summary.json").read_text())["status"] == "running"  # what kill -9 leaves
    # job 1 is held so that the stop interrupts it; on a rare schedule (seen once in CI, not understood) it
    # has finished first, and the continued sweep then skips it: the rest of the test holds either way
    other_status = json.loads((other_dir / "summary.json").read_text())["status"]
    assert other_status in ("interrupted", "completed"), other_status

    (line,) = [ln for ln in output.splitlines() if ln.startswith("continue the sweep with: ")]
    argv = shlex.split(line.removeprefix("continue the sweep with: "))
    assert argv[:3] == ["python", "train.py", "-m"]
    argv = [a.replace("seed=0,1,2", "seed=2,0,1") for a in argv[1:]]  # jobs are matched by their overrides
    resumed = SweepProcess(argv, tmp_path / "resume.log", env())
    code, _ = resumed.wait(600)
    output = (tmp_path / "resume.log").read_text()
    assert code == 0, output[-3000:]
    assert (
        "left running by a process that ended without saving" in output
        and "resuming from checkpoints/step_" in output
    )
    if other_status == "interrupted":
        assert "interrupted at step" in output
    # the reordered command numbers seed=2 first; it keeps its directory all the same
    assert "#0 seed=2 — not started yet: starting it" in output or "so it starts again from step 0" in output

    ref, got = by_seed(tmp_path / "reference"), by_seed(sweep_dir)
    assert sorted(got) == sorted(ref) == [0, 1, 2]
    for name in ref:
        summary = json.loads((got[name] / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == steps, summary
        rows = training_rows(got[name])
        assert [r["step"] for r in rows if "loss" in r] == list(range(steps))  # every step once
        assert comparable(rows) == comparable(training_rows(ref[name]))  # bit for bit


def test_fault_delays_shrink_to_the_reference_sweep():
    # a fast machine: a 10 s reference and 4 faults draw from (0.5, 3.75), not up to 8 s
    assert fault_delays((0.5, 8.0), 10.0, 4) == (0.5, 3.75)
    assert fault_delays((0.5, 8.0), 100.0, 4) == (0.5, 8.0)  # a slow one keeps the asked range
    assert fault_delays((0.5, 8.0), 0.1, 4) == (0.5, 0.5)  # never below the lower end


@pytest.mark.slow
def test_soak_small(tmp_path, cache_dir):
    """The soak of scripts/soak_sweep.py at a small size: 3 jobs, 6 random faults (2 of them file faults),
    one pair of concurrent single runs and, as root, a full disk."""
    result = soak(
        spec(
            tmp_path,
            cache_dir,
            jobs=3,
            steps=600,
            faults=6,
            delay_s=(0.5, 8.0),
            seed=os.getpid(),
            concurrent_runs=1,
        )
    )
    assert result.ok, result.to_json()
    assert result.survived == len(result.faults) >= 7 and result.steps_lost == 0 and result.equal == 3
    assert result.mislabeled == 0
    kinds = [f.kind for f in result.faults]
    # 4 signals and 2 file faults planned; a file fault that came before any job wrote a file (a loaded
    # machine) was sent as a signal, and the result says so
    assert kinds.count("signal") == 4 + result.file_faults_as_signals and "concurrent start" in kinds


@pytest.mark.slow
def test_soak_with_history_splices_damaged_data_and_signals_after_the_end(tmp_path, cache_dir):
    """Issue 39's faults in the joblib soak: a job rewound into another history with its new last.pt cut
    short (auto must continue from the rewind's step, never from the abandoned history's checkpoint), a
    newest checkpoint whose tensor data is damaged (auto passes over it), and signals just after a single
    run and the finished sweep ended (exit 0). Every job ends bit-identical to the uninterrupted sweep."""
    from soak.spec import DAMAGED_DATA, HISTORY_SPLICE

    result = soak(
        spec(
            tmp_path,
            cache_dir,
            jobs=3,
            steps=600,
            faults=5,
            file_share=0.6,
            file_kinds=(HISTORY_SPLICE, DAMAGED_DATA),
            delay_s=(2.0, 10.0),
            seed=os.getpid(),
            concurrent_runs=0,
            disk_full=False,
        )
    )
    assert result.ok, result.to_json()
    kinds = [f.kind for f in result.faults]
    assert kinds.count("after-end-signal") == 2 and result.steps_lost == 0 and result.equal == 3
    planned = 3 - result.file_faults_as_signals  # file faults that found their files
    assert kinds.count(HISTORY_SPLICE) + kinds.count(DAMAGED_DATA) == planned


def test_the_fault_plan_mixes_file_faults_in_after_a_signal():
    import random

    for seed in range(20):
        plan = fault_plan(SoakSpec(workdir=Path("x"), faults=16, file_share=0.35), random.Random(seed))
        assert plan[0] == "signal" and plan.count("file") == 6 and len(plan) == 16
    assert fault_plan(SoakSpec(workdir=Path("x"), faults=1, file_share=1.0), random.Random(0)) == ["signal"]


def test_file_faults_damage_an_unfinished_jobs_files(tmp_path):
    """What the soak does to a stopped sweep: a metrics.jsonl cut mid-row, a newest checkpoint cut short —
    the unfinished job's, not the finished one's."""
    import random

    import yaml

    for name, status, seed in (("0_a", "completed", 0), ("1_b", "interrupted", 1)):
        run = tmp_path / name
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={seed}"]))
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed}))
        (run / "summary.json").write_text(json.dumps({"status": status, "seed": seed}))
        (run / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": i, "loss": 1.0}) + "\n" for i in range(40))
        )
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "step_000010.pt").write_bytes(b"x" * 300)
    before = (tmp_path / "1_b" / "metrics.jsonl").read_bytes()
    assert damage_a_file(tmp_path, "truncated-metrics", random.Random(0)) == "seed=1"
    after = (tmp_path / "1_b" / "metrics.jsonl").read_bytes()
    assert before.startswith(after) and 0.3 * len(before) <= len(after) < len(before)
    assert damage_a_file(tmp_path, "damaged-checkpoint", random.Random(0)) == "seed=1"
    assert (tmp_path / "1_b" / "checkpoints" / "step_000010.pt").stat().st_size == 100
    assert mislabeled(job_dirs(tmp_path)) == []
    (tmp_path / "1_b" / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"seed": 0})
    )  # another run's config
    assert mislabeled(job_dirs(tmp_path)) == ["seed=1: seed=1 trained it, but {'config.yaml': 0}"]


def test_the_damaged_data_fault_leaves_a_checkpoint_torch_opens_but_auto_passes_over(tmp_path):
    """The soak's damaged-data fault (issue 39, point 4): the zip index whole, the tensor bytes not."""
    import random

    import yaml

    from normlab.train import checkpoint

    run = tmp_path / "1_b"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["seed=1"]))
    (run / "summary.json").write_text(json.dumps({"status": "interrupted", "seed": 1}))
    state = {"model": {"w": torch.arange(4096, dtype=torch.float32)}, "step": 7}
    checkpoint.save_checkpoint(run / "checkpoints" / "last.pt", state)
    assert checkpoint.readable(run / "checkpoints" / "last.pt")
    assert damage_a_file(tmp_path, "damaged-data", random.Random(0)) == "seed=1"
    assert checkpoint._read(run / "checkpoints" / "last.pt", mmap=True)["step"] == 7  # torch still opens it
    assert not checkpoint.readable(run / "checkpoints" / "last.pt")
    assert checkpoint.newest(run / "checkpoints") is None
