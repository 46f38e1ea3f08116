"""A run (or sweep) directory is owned by one process before anything is written into it (issue 29, finding 1
and the sweep half of finding 10): two starts at the same moment leave one run whose `.hydra/` is its own,
and the refused start writes nothing there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_run import ROOT, base_overrides
from filelock import FileLock

from normlab.errors import UserError
from normlab.train.run_dir import LOCK_FILE, claim_run_dir, in_use, release_claims


def test_hydra_writes_the_config_only_once_the_directory_is_claimed(train_cli, tmp_path, monkeypatch):
    """Deterministic form of the race: when Hydra saves .hydra/config.yaml, this process already holds the
    directory's lock, so a second start at the same moment can only be refused before it writes."""
    import hydra.core.utils as hydra_utils

    held_when_saved = []
    real = hydra_utils._save_config

    def save(cfg, filename, output_dir):
        if filename == "config.yaml":
            held_when_saved.append(in_use(output_dir.parent))  # asked from another file descriptor
        return real(cfg, filename, output_dir)

    monkeypatch.setattr(hydra_utils, "_save_config", save)
    result = train_cli(run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    assert held_when_saved == [True]
    assert not in_use(tmp_path / "run")  # released when the command ended


def test_a_start_refused_by_a_claimed_directory_writes_nothing(train_cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with FileLock(str(run / LOCK_FILE)):  # another start that got there first, before writing anything
        result = train_cli("optim.lr=0.01", run_dir=run)
    assert result.code == 2 and "Another run is using" in result.output
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]  # no .hydra/, no train.log, no summary


def test_claiming_refuses_an_earlier_run_and_a_file_in_the_way(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match="a-file is a file"):
        claim_run_dir(tmp_path / "a-file" / "run", None)
    assert not (tmp_path / "a-file").is_dir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n')
    with pytest.raises(UserError, match="already holds a run"):
        claim_run_dir(run, None)
    assert not in_use(run)  # a refused claim lets go of the lock
    claim = claim_run_dir(run, "auto")  # continuing it is allowed
    assert in_use(run)
    claim.release()
    release_claims()


def _start(tmp_path: Path, run: Path, lr: str, cache: Path) -> subprocess.Popen:
    args = [*base_overrides([], cache), f"optim.lr={lr}", f"hydra.run.dir={run}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("trial", [0, *(pytest.param(t, marks=pytest.mark.slow) for t in range(1, 10))])
def test_two_runs_started_together_into_one_directory(tmp_path, cache_dir, trial):
    """Two `python train.py … &` at the same second into one directory (finding 1): one trains, the other
    is refused in one sentence, and the survivor's .hydra/ and summary.json carry the survivor's own lr."""
    run = tmp_path / "run"
    procs = {lr: _start(tmp_path, run, lr, cache_dir) for lr in ("0.001", "0.01")}
    outputs = {lr: p.communicate(timeout=240)[0] for lr, p in procs.items()}
    codes = {lr: p.returncode for lr, p in procs.items()}
    assert sorted(codes.values()) == [0, 2], outputs
    survivor = next(lr for lr, c in codes.items() if c == 0)
    refused = next(lr for lr, c in codes.items() if c == 2)
    assert "Traceback" not in outputs[refused]
    assert "Another run is using" in outputs[refused] or "already holds a run" in outputs[refused]
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
    assert config["optim"]["lr"] == float(survivor)
    assert f"optim.lr={survivor}" in overrides and f"optim.lr={refused}" not in overrides
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    log = (run / "train.log").read_text()
    assert log.count("training from step 0") == 1  # the refused start logged nothing there


def test_a_sweep_directory_another_sweep_is_using_is_refused(train_cli, tmp_path):
    """Two sweeps into one sweep directory (finding 10): the second is refused before Hydra writes its
    multirun.yaml, so the first sweep's record and progress count stay its own."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    with FileLock(str(sweep / LOCK_FILE)):  # what a running sweep's parent holds
        result = train_cli("-m", "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert result.code == 2 and "Traceback" not in result.output
    assert f"Another sweep is using {sweep} right now" in result.output
    assert sorted(p.name for p in sweep.iterdir()) == [LOCK_FILE]  # no multirun.yaml, no job directory


@pytest.mark.slow
def test_two_sweeps_started_together_into_one_directory(tmp_path, cache_dir):
    sweep = tmp_path / "sweep"
    first, second = (_sweep_env(tmp_path, sweep, cache_dir, {}) for _ in range(2))
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes == [0, 2], outputs
    refused = outputs[[first.returncode, second.returncode].index(2)]
    assert "Another sweep is using" in refused or "already holds a sweep" in refused
    done = (sweep / ".sweep_done").read_text().split()
    assert sorted(done) == ["0", "1"]  # not "4/2 done"
    for job, seed in (("0_ln-pre-L2-w2-s0", 0), ("1_ln-pre-L2-w2-s1", 1)):
        assert yaml.safe_load((sweep / job / ".hydra" / "config.yaml").read_text())["seed"] == seed


@pytest.mark.slow
def test_a_killed_sweep_parent_leaves_no_temporary_folder(tmp_path, cache_dir):
    """A SIGKILLed joblib sweep parent (finding 10): its job processes notice, save, and remove the folder
    they hand their results back through; nothing is left in the temporary directory or the sweep's."""
    sweep = tmp_path / "sweep"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    extra = ("hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "train.max_steps=100000")
    proc = _sweep_env(tmp_path, sweep, cache_dir, {"TMPDIR": str(tmp)}, *extra)
    deadline = time.monotonic() + 240
    while len(list(sweep.glob("*/metrics.jsonl"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(60)
    deadline = time.monotonic() + 60  # the jobs notice within a second, save and exit
    while any(json.loads(p.read_text())["status"] == "running" for p in sweep.glob("*/summary.json")):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(2.0)  # the job processes write their summary, then clean up and exit
    assert [p.name for p in tmp.iterdir() if p.name.startswith("normlab-")] == []
    assert [p.name for p in sweep.iterdir() if p.name.startswith(".") and p.is_dir()] == []


def test_a_dead_sweeps_results_folder_is_cleared_by_the_next_invocation(train_cli, tmp_path):
    from normlab.sweeps.results import RESULTS_PREFIX

    sweep = tmp_path / "sweep"
    assert train_cli("-m", "seed=0", f"hydra.sweep.dir={sweep}").code == 0
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = sweep / f"{RESULTS_PREFIX}{dead.pid}-1"
    stale.mkdir()
    (stale / "0.pkl").write_bytes(b"x")
    assert train_cli("-m", "seed=0", f"hydra.sweep.dir={sweep}", "train.resume=auto").code == 0
    assert not stale.exists()


def _sweep_env(
    tmp_path: Path, sweep: Path, cache: Path, env: dict[str, str], *extra: str
) -> subprocess.Popen:
    args = [*base_overrides([], cache), "seed=0,1", f"hydra.sweep.dir={sweep}", *extra]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), "-m", *args],
        cwd=tmp_path,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
