"""W&B: mode resolution, offline runs with full history, failures that never stop training, sweeps."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_records import read_run

from normlab.metrics import names
from normlab.metrics.wandb_sink import WandbSink, flatten, has_credentials, resolve_mode, run_config, run_tags
from normlab.metrics.wandb_sync import fragments, sync_command
from normlab.train.run import Run

URL = "https://api.example.test"


def offline_runs(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))


def written_offline_runs(run_dir: Path) -> list[Path]:
    """The offline runs of `run_dir`, once W&B says it has written them.

    `run.finish()` returns before W&B's service has flushed the run's transaction log (reading it at once
    found it empty about half the time); `wandb.teardown()` returns only when W&B has finished every run and
    shut its service down, which is its own signal that the files are complete.
    """
    import wandb

    wandb.teardown()
    return offline_runs(run_dir)


def test_mode_follows_credentials_and_wandb_mode(tmp_path):
    no_netrc = {"NETRC": str(tmp_path / "missing")}
    assert resolve_mode("auto", URL, no_netrc) == "offline"
    assert resolve_mode("auto", URL, {**no_netrc, "WANDB_API_KEY": "x" * 40}) == "online"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.example.test\n  login user\n  password " + "k" * 40 + "\n")
    assert has_credentials(URL, {"NETRC": str(netrc)})
    assert not has_credentials("https://other.test", {"NETRC": str(netrc)})
    assert resolve_mode("auto", URL, {"NETRC": str(netrc)}) == "online"
    assert resolve_mode("auto", URL, {"NETRC": str(netrc), "WANDB_MODE": "offline"}) == "offline"
    assert resolve_mode("offline", URL, {**no_netrc, "WANDB_API_KEY": "x"}) == "offline"
    assert resolve_mode("disabled", URL, no_netrc) == "disabled"
    with pytest.raises(ValueError, match="choose one of"):
        resolve_mode("sometimes", URL, no_netrc)


def test_config_is_flat_with_the_choices_at_the_top(make_cfg):
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(make_cfg("norm=rms", "placement=post", "depth=3"), resolve=True)
    flat = run_config(cfg)
    assert (flat["norm"], flat["placement"], flat["depth"], flat["warmup_steps"]) == ("rms", "post", 3, 2)
    assert flat["model.d_model"] == 64 and flat["train.batch_size"] == 8
    assert not any(isinstance(v, dict) for v in flat.values())
    assert flatten({"a": {"b": {"c": 1}}, "d": [1, 2]}) == {"a.b.c": 1, "d": [1, 2]}
    assert run_tags(cfg)[:4] == ["rms", "post", "L3", "w2"]


def test_offline_run_writes_history_config_and_exit_code(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    summary = Run(
        make_cfg("logger=wandb", "train.max_steps=12", "metrics.every=5", "metrics.dense_until=0"), tmp_path
    ).execute()
    assert summary["status"] == "completed"
    (path,) = written_offline_runs(tmp_path)  # inside the run directory, not the repository
    record = read_run(path)
    history = [h for h in record["history"] if names.LOSS in h]
    assert [h[names.STEP] for h in history] == list(range(12))
    assert all(names.GRAD_NORM in h and names.grad_norm_layer(1) in h for h in history)
    assert names.act_rms_layer(0) in history[5] and names.act_rms_layer(0) not in history[4]
    assert any(k.startswith(names.grad_hist_layer(0)) for k in history[0])  # histograms at step 0
    assert any(names.VAL_LOSS in h for h in record["history"])
    assert record["config"]["norm"] == "ln" and record["config"]["depth"] == 2
    assert record["run"].run_group == "default" and record["run"].display_name == summary["name"]
    assert record["exit_code"] == 0


def test_a_failing_wandb_never_stops_training(make_cfg, tmp_path, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("no service")

    monkeypatch.setattr(wandb, "init", broken_init)
    monkeypatch.setenv("WANDB_MODE", "offline")
    summary = Run(make_cfg("logger=wandb"), tmp_path).execute()
    assert summary["status"] == "completed"
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 4  # 3 steps + the final evaluation


def test_a_failing_log_disables_the_sink_only():
    class FlakyRun:
        finished_with = None

        def log(self, row):
            raise OSError("disk full")

        def finish(self, exit_code):
            self.finished_with = exit_code

    run = FlakyRun()
    sink = WandbSink(run, wandb=None)
    sink.log({names.STEP: 0, names.LOSS: 1.0})  # does not raise
    sink.log({names.STEP: 1, names.LOSS: 1.0})
    sink.finish({"status": "completed"})
    assert run.finished_with == 1 and sink.run is None


@pytest.mark.slow  # a 3-job sweep in a subprocess with W&B offline (~20 s)
def test_multirun_groups_wandb_runs_by_sweep_and_goes_on_past_divergence(
    cache_dir, tmp_path, tiny_overrides, repo_root
):
    sweep = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["NETRC"] = str(tmp_path / "no-netrc")  # no credentials anywhere: W&B must go offline on its own
    cmd = [
        sys.executable,
        "train.py",
        "-m",
        *tiny_overrides,
        f"data.cache_dir={cache_dir}",
        "logger=wandb",
        "norm=none",
        "warmup_steps=0",
        "train.grad_clip=0",
        "train.max_steps=20",
        "optim.lr=1e5,3e-3",
        f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wandb sync" in proc.stdout + proc.stderr
    jobs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    statuses = [json.loads((j / "summary.json").read_text())["status"] for j in jobs]
    assert statuses == ["diverged", "completed"]
    records = [read_run(offline_runs(j)[0]) for j in jobs]
    groups = {r["run"].run_group for r in records}
    assert len(groups) == 1 and groups.pop().endswith("sweep")
    assert [r["exit_code"] for r in records] == [1, 0]


def test_a_resumed_run_continues_its_own_wandb_run(make_cfg, tmp_path, monkeypatch, caplog):
    """SIGINT, then train.resume=RUN_DIR in the same directory: one W&B run (the id kept in the run
    directory), its history the steps before the stop and the steps after it, each once."""
    import signal

    from normlab.metrics.wandb_sink import RUN_ID_FILE
    from normlab.train.signals import StopRequest

    class StopAfter(StopRequest):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.polls = 0
            self.n = n

        def __call__(self) -> bool:
            self.polls += 1
            if self.polls >= self.n and self.signum is None:
                self.request(signal.SIGINT)
            return super().__call__()

    monkeypatch.setenv("WANDB_MODE", "offline")
    settings = ["logger=wandb", "train.max_steps=10", "train.flush_every=1", "metrics.dense_until=0"]
    first = Run(make_cfg(*settings), tmp_path, stop=StopAfter(4)).execute()
    assert first["status"] == "interrupted" and first["steps"] == 4
    kept = (tmp_path / RUN_ID_FILE).read_text().strip()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="normlab"):
        second = Run(make_cfg(*settings, f"train.resume={tmp_path}"), tmp_path).execute()
    assert second["status"] == "completed"
    paths = written_offline_runs(tmp_path)
    assert len(paths) == 2  # W&B writes each process's part in its own folder (a fragment)
    # the resumed run prints one command that uploads both fragments, oldest first, under the kept id
    (line,) = [r.getMessage() for r in caplog.records if "W&B offline" in r.getMessage()]
    command = shlex.split(line.split(" as one W&B run with: ", 1)[1])
    assert command[:7] == ["wandb", "beta", "sync", "--id", kept, "-p", "normlab"]
    assert command[7:] == [str(p.parent) for p in paths]  # every fragment, in order of start
    assert command[7:] == [str(p) for p in fragments(tmp_path, kept)]
    records = [read_run(p) for p in paths]
    assert {r["run"].run_id for r in records} == {kept}
    steps = [h[names.STEP] for r in records for h in r["history"] if names.LOSS in h]
    assert sorted(steps) == list(range(10))
    assert [r["exit_code"] for r in records] == [1, 0]
    # a run started afresh in a directory gets a new W&B run
    fresh = tmp_path / "fresh"
    Run(make_cfg(*settings), fresh).execute()
    assert (fresh / RUN_ID_FILE).read_text().strip() != kept


def test_fragments_are_ordered_by_start_and_same_second_suffix(tmp_path):
    """W&B names a fragment offline-run-YYYYMMDD_HHMMSS-ID, adding -N where that second's folder exists."""
    names_ = [
        "offline-run-20260101_120000-abcd1234",
        "offline-run-20260101_120000-abcd1234-1",
        "offline-run-20260101_115959-abcd1234",
        "offline-run-20260101_120001-other123",  # another W&B run
        "run-20260101_120002-abcd1234",  # an online fragment: uploaded already
    ]
    for n in names_:
        (tmp_path / "wandb" / n).mkdir(parents=True)
    found = [p.name for p in fragments(tmp_path, "abcd1234")]
    assert found == [names_[2], names_[0], names_[1]]
    parts = fragments(tmp_path, "abcd1234")
    assert sync_command(parts[:1], "abcd1234", "normlab") == f"wandb sync {parts[0]}"
    assert sync_command(parts, "abcd1234", "proj", "team").startswith(
        "wandb beta sync --id abcd1234 -p proj -e team "
    )


@pytest.mark.slow  # starts W&B's CLI (a few seconds)
def test_wandbs_cli_accepts_the_sync_command_and_lists_every_fragment(tmp_path):
    """What can be checked without a server: `wandb beta sync --dry-run` takes the printed command and would
    upload every fragment of the run (the upload itself needs a server and is not checked here)."""
    import wandb

    settings = wandb.Settings(mode="offline", console="off", silent=True, x_disable_stats=True)
    for start in (0, 5):
        run = wandb.init(
            id="frag1234", resume="allow", project="normlab", dir=str(tmp_path), settings=settings
        )
        for step in range(start, start + 5):
            run.log({names.STEP: step, names.LOSS: 1.0 / (step + 1)})
        run.finish()
    wandb.teardown()
    parts = fragments(tmp_path, "frag1234")
    assert len(parts) == 2
    command = shlex.split(sync_command(parts, "frag1234", "normlab"))
    env = {**os.environ, "HOME": str(tmp_path), "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    out = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    said = out.stdout + out.stderr
    assert "Would sync 2 run(s)" in said
    for part in parts:
        assert str(part / "run-frag1234.wandb") in said
