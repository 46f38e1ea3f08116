"""torchrun: 2 CPU ranks (gloo) train the run a 1-rank process trains with the same global batch.

Tolerance: the ranks average two half-batch gradients where one process sums one full batch, so float32
sums run in another order; 20 steps of AdamW keep losses and gradient norms within 1e-4 relative
(measured: ≤ 2e-6 for the loss, ≤ 5e-5 for per-block norms).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as torch_dist
from tiny_run import CORPUS, LOOP

from normlab import distributed
from normlab.distributed import Dist

TOLERANCE = 1e-4
STEPS = 20
COMMON = [
    "model=tiny",
    *LOOP,
    *CORPUS,
    f"train.max_steps={STEPS}",
    "train.eval_every=10",
    "train.sample_tokens=4",
    "train.ckpt_every=10",
    "warmup_steps=5",
]

pytestmark = pytest.mark.skipif(not torch_dist.is_available(), reason="torch.distributed is not built in")


def train(cwd: Path, cache_dir: Path, overrides: list[str], ranks: int) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    cmd = [*(launcher if ranks > 1 else [sys.executable]), str(Path(__file__).parents[1] / "train.py")]
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*cmd, *COMMON, f"data.cache_dir={cache_dir}", *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b), 1e-8)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, Path]:
    """A 1-rank run with batch 8 and a 2-rank run with batch 4 per rank, each in its own working dir."""
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    r1 = train(one, cache_dir, ["train.batch_size=8"], ranks=1)
    assert r1.returncode == 0, r1.stderr[-3000:]
    r2 = train(two, cache_dir, ["train.batch_size=4"], ranks=2)
    assert r2.returncode == 0, r2.stderr[-3000:]
    return one, two


def only_run_dir(cwd: Path) -> Path:
    dirs = [p for p in (cwd / "outputs" / "runs").glob("*/*") if p.is_dir()]
    assert len(dirs) == 1, dirs  # Hydra's timestamped dir, the same for both ranks
    return dirs[0]


def test_two_ranks_log_what_one_rank_logs_for_the_same_global_batch(pair):
    one, two = (rows(only_run_dir(d)) for d in pair)
    assert [r["step"] for r in one] == [r["step"] for r in two]
    compared = 0
    for a, b in zip(one, two, strict=True):
        for key in a:
            if key == "loss" or key == "val_loss" or key.startswith("grad_norm"):
                assert close(a[key], b[key]), (a["step"], key, a[key], b[key])
                compared += 1
    assert compared > STEPS * 3  # loss, global and per-block norms on every step


def test_rank_zero_alone_writes_one_run_directory(pair):
    one, two = (only_run_dir(d) for d in pair)
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert sorted(p.name for p in (two / "checkpoints").iterdir()) == ["last.pt", "step_000010.pt"]
    summary = json.loads((two / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["world_size"] == 2 and summary["global_batch_size"] == 8
    single = json.loads((one / "summary.json").read_text())
    assert single["world_size"] == 1 and single["global_batch_size"] == 8
    assert close(summary["final_val_loss"], single["final_val_loss"])
    log_lines = (two / "train.log").read_text().count("training from step 0")
    assert log_lines == 1  # rank 1 logs nothing into the run directory


def test_a_sweep_under_torchrun_is_refused_in_one_sentence(tmp_path, cache_dir):
    r = train(tmp_path, cache_dir, ["-m", "seed=0,1"], ranks=2)
    assert r.returncode != 0
    assert "torchrun trains one run on several processes and cannot run a sweep" in r.stderr
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "outputs").exists()


def test_shared_run_dir_is_rank_zeros_and_other_ranks_write_nothing():
    assert distributed.shared_run_dir_override(["norm=ln"], distributed.SINGLE) == []
    rank1 = Dist(rank=1, world_size=2)
    extra = distributed.shared_run_dir_override(["hydra.run.dir=/x"], rank1)
    assert extra == [
        "hydra.output_subdir=null",
        "hydra/job_logging=disabled",
        "~hydra.callbacks.run_dir_guard",
    ]


def test_single_process_averaging_is_a_no_op():
    import torch

    t = torch.tensor([1.0, 2.0])
    distributed.SINGLE.average_([t])
    assert t.tolist() == [1.0, 2.0]
    assert distributed.SINGLE.any(True) and not distributed.SINGLE.any(False)


@pytest.mark.slow
def test_sigterm_stops_every_rank_at_one_step_and_torchrun_resumes_it(tmp_path, cache_dir):
    import signal
    import time

    run_dir = tmp_path / "run"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    args = [*COMMON, f"data.cache_dir={cache_dir}", "train.batch_size=4", f"hydra.run.dir={run_dir}"]
    args = [a for a in args if not a.startswith("train.max_steps")]
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    train_py = str(Path(__file__).parents[1] / "train.py")
    proc = subprocess.Popen(
        [*launcher, train_py, *args, "train.max_steps=100000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (run_dir / "metrics.jsonl").is_file():
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)  # torchrun passes it on to both ranks
    proc.communicate(timeout=120)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    stopped = summary["steps"]
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert summary["resume_command"].startswith("torchrun --nproc_per_node=2 train.py")
    assert [r["step"] for r in rows(run_dir) if "loss" in r] == list(range(stopped))

    end = stopped + 10
    resumed = subprocess.run(
        [*launcher, train_py, *args, f"train.max_steps={end}", f"train.resume={run_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert [r["step"] for r in rows(run_dir) if "loss" in r] == list(range(end))  # no gap, no duplicate


def bn_losses(tmp_path: Path, cache_dir: Path, sync: bool) -> tuple[list[dict], list[dict]]:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    common = ["norm=bn", "train.eval_every=0"]
    r1 = train(one, cache_dir, [*common, "train.batch_size=8"], ranks=1)
    assert r1.returncode == 0, r1.stderr[-3000:]
    r2 = train(two, cache_dir, [*common, "train.batch_size=4", f"norm.sync={str(sync).lower()}"], ranks=2)
    assert r2.returncode == 0, r2.stderr[-3000:]
    return rows(only_run_dir(one)), rows(only_run_dir(two))


@pytest.mark.slow
def test_synced_batchnorm_normalises_with_the_global_batch(tmp_path, cache_dir):
    one, two = bn_losses(tmp_path, cache_dir, sync=True)
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "grad_norm", "val_loss"):
            if key in a:
                assert close(a[key], b[key]), (a["step"], key, a[key], b[key])


@pytest.mark.slow
def test_per_rank_batchnorm_is_a_different_network(tmp_path, cache_dir):
    """The same comparison without norm.sync: each rank's BN sees half the batch, and it shows."""
    one, two = bn_losses(tmp_path, cache_dir, sync=False)
    assert not all(close(a["loss"], b["loss"]) for a, b in zip(one, two, strict=True) if "loss" in a)
