"""Sweeps through Hydra's submitit launcher, run locally (`hydra/launcher=submitit_local`: the path a
SLURM sweep takes, with processes instead of SLURM jobs), and preemption → requeue → resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_run import CORPUS, LOOP

from normlab import requeue
from normlab.train.signals import Reaction

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

TRAIN_PY = str(Path(__file__).parents[1] / "train.py")
COMMON = [
    "hydra/launcher=submitit_local",
    "hydra.launcher.timeout_min=10",
    "model=tiny",
    *LOOP,
    *CORPUS,
    "train.batch_size=4",
    "train.eval_every=0",
    "train.sample_tokens=0",
    "train.num_threads=1",
    "warmup_steps=2",
]


def sweep(tmp_path: Path, cache_dir: Path, *overrides: str, wait: bool = True, session: bool = False):
    cmd = [sys.executable, TRAIN_PY, "-m", *COMMON, f"data.cache_dir={cache_dir}", *overrides]
    cmd.append(f"hydra.sweep.dir={tmp_path / 'sweep'}")
    env = {**os.environ, "WANDB_MODE": "disabled"}
    if wait:
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=session,  # its own process group, as a terminal gives it
    )


def summaries(sweep_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}


def test_a_sweep_runs_as_submitit_jobs(tmp_path, cache_dir):
    r = sweep(tmp_path, cache_dir, "seed=0,1", "train.max_steps=3")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    found = summaries(tmp_path / "sweep")
    assert sorted(found) == ["0_ln-pre-L2-w2-s0", "1_ln-pre-L2-w2-s1"]
    assert all(s["status"] == "completed" and s["steps"] == 3 for s in found.values())
    assert list((tmp_path / "sweep" / ".submitit").iterdir())  # submitit's own job folders and logs


def task_pids(sweep_dir: Path) -> list[int]:
    """The submitit task processes (python -m submitit.core._submit FOLDER) of this sweep."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "submitit.core._submit" in cmdline and str(sweep_dir) in cmdline:
            pids.append(int(proc.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the job's process through /proc")
def test_preempted_job_is_requeued_and_resumes_its_run(tmp_path, cache_dir):
    steps = 400
    proc = sweep(tmp_path, cache_dir, "seed=0", f"train.max_steps={steps}", "train.flush_every=5", wait=False)
    sweep_dir = tmp_path / "sweep"
    metrics = sweep_dir / "0_ln-pre-L2-w2-s0" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (metrics.is_file() and metrics.stat().st_size > 0):
        time.sleep(0.2)
    pids = task_pids(sweep_dir)
    assert pids, "the job's process was not found"
    for pid in pids:
        os.kill(pid, requeue.submitit_preempt_signal())
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    summary = summaries(sweep_dir)["0_ln-pre-L2-w2-s0"]
    assert summary["status"] == "completed" and summary["steps"] == steps, summary
    assert summary["resumed_from"], summary  # the requeued job continued from the checkpoint
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(steps))  # no gap, no duplicate


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the job's process through /proc")
@pytest.mark.parametrize("target", ["group", "parent"])
def test_a_signal_to_the_sweep_stops_every_local_job_saved(tmp_path, cache_dir, target):
    """SIGINT to the sweep's process group (Ctrl-C) or SIGTERM to its parent alone: each submitit job stops
    at a step boundary with last.pt and summary.json, and no job process outlives the parent."""
    signum = signal.SIGINT if target == "group" else signal.SIGTERM
    proc = sweep(
        tmp_path,
        cache_dir,
        "seed=0,1",
        "train.max_steps=100000",
        "train.flush_every=100000",
        wait=False,
        session=True,
    )
    sweep_dir = tmp_path / "sweep"
    deadline = time.monotonic() + 240
    while (
        time.monotonic() < deadline
        and len(list(sweep_dir.glob("*/checkpoints"))) + len(training(sweep_dir)) < 2
    ):
        assert proc.poll() is None, proc.stdout.read()[-3000:] if proc.stdout else ""
        time.sleep(0.1)
    tasks = task_pids(sweep_dir)
    assert len(tasks) == 2, tasks
    if target == "group":
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signum, out[-4000:]
    assert f"[sweep] stopped by {signal.Signals(signum).name}: 2 interrupted" in out, out[-3000:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and task_pids(sweep_dir):
        time.sleep(0.1)
    assert task_pids(sweep_dir) == []
    for name, summary in summaries(sweep_dir).items():
        assert summary["status"] == "interrupted" and summary["signal"] == signal.Signals(signum).name, (
            summary
        )
        last = torch.load(sweep_dir / name / "checkpoints" / "last.pt", weights_only=True, mmap=True)
        assert last["step"] == summary["steps"] > 0


def training(sweep_dir: Path) -> list[Path]:
    """Job directories whose run is in its training loop (it has written summary.json `running` and rows)."""
    return [
        d for d in sweep_dir.glob("*_*") if (d / "summary.json").exists() and (d / "metrics.jsonl").exists()
    ]


def test_preemption_signal_is_a_requeue_inside_submitit_only(monkeypatch, tmp_path):
    monkeypatch.delenv(requeue.EXECUTOR_ENV, raising=False)
    assert requeue.preempt_signal() is None
    assert not requeue.requeued_resume(tmp_path)
    monkeypatch.setenv(requeue.EXECUTOR_ENV, "slurm")
    monkeypatch.delenv(requeue.PREEMPT_SIGNAL_ENV, raising=False)
    assert requeue.preempt_signal() == signal.SIGUSR2  # submitit's default
    monkeypatch.setenv(requeue.PREEMPT_SIGNAL_ENV, "USR1")
    assert requeue.preempt_signal() == signal.SIGUSR1
    stop = requeue.stop_request()
    assert (
        stop.reactions[signal.SIGUSR1] is Reaction.REQUEUE and stop.reactions[signal.SIGTERM] is Reaction.STOP
    )


def test_requeued_resume_needs_an_interrupted_run_and_a_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv(requeue.EXECUTOR_ENV, "local")
    (tmp_path / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    assert not requeue.requeued_resume(tmp_path)  # no checkpoint: nothing to resume
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"x")
    assert requeue.requeued_resume(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed"}))
    assert not requeue.requeued_resume(tmp_path)  # a finished run is not started again


@pytest.mark.slow
def test_a_job_of_two_tasks_is_one_run_on_two_ranks(tmp_path, cache_dir):
    """SLURM × torchrun's stand-in: hydra.launcher.tasks_per_node=2 trains one run on 2 ranks, which
    logs what one task with the same global batch logs (tolerance as in tests/test_distributed.py)."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    common = ["seed=0", "train.max_steps=10"]
    r1 = sweep(one, cache_dir, *common, "train.batch_size=8")
    r2 = sweep(two, cache_dir, *common, "train.batch_size=4", "hydra.launcher.tasks_per_node=2")
    assert r1.returncode == 0 and r2.returncode == 0, r2.stdout[-2000:] + r2.stderr[-3000:]
    s1, s2 = (summaries(d / "sweep")["0_ln-pre-L2-w2-s0"] for d in (one, two))
    assert s2["world_size"] == 2 and s2["global_batch_size"] == s1["global_batch_size"] == 8
    assert abs(s1["final_val_loss"] - s2["final_val_loss"]) <= 1e-4 * abs(s1["final_val_loss"])
