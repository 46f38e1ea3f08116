"""A run whose summary.json is written stays as it ended, whatever signals come after (issue 29, finding 7;
issue 39, point 7): two or three signals while its sample is written, or one while the command winds down —
Hydra finishing, the interpreter exiting — leave a completed run completed, with its sample, and the command
exits 0 (an interrupted one 130), saying "received after the run ended"; the same for a finished sweep; a
Ctrl-C pressed twice or three times never ends in a traceback."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from cli_run import BASE, SYNTHETIC
from soak.faults import after_the_end


@pytest.mark.parametrize(
    "count", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 3]
)
def test_signals_while_the_sample_is_written(train_cli, tmp_path, monkeypatch, count):
    import normlab.train.sample as sample_mod

    real = sample_mod.generate

    def generate(*args, **kwargs):
        for _ in range(count):
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(sample_mod, "generate", generate)
    result = train_cli("train.sample_tokens=4", run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    summary = result.summary
    assert summary["status"] == "completed" and summary["reason"] is None and summary["signal"] is None
    assert (tmp_path / "run" / "sample.txt").read_text().strip()
    assert "received after the run ended (completed): nothing to stop" in result.output


def test_a_signal_while_the_command_winds_down(train_cli, tmp_path, monkeypatch):
    """After Run.execute has returned (its lock released, Hydra finishing): still nothing to stop."""
    import normlab.train.run_dir as run_dir

    real = run_dir.RunDirectory.release

    def release(self):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        real(self)

    monkeypatch.setattr(run_dir.RunDirectory, "release", release)
    result = train_cli(run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    assert result.summary["status"] == "completed"


def test_a_signal_during_training_still_stops_the_run(train_cli, tmp_path, monkeypatch):
    """The handler that ignores late signals is the run's own, settled: a run that has not ended stops."""
    from normlab.metrics.sinks import JsonlSink

    real = JsonlSink.log

    def log(self, row):
        real(self, row)
        if row.get("step") == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(JsonlSink, "log", log)
    result = train_cli("train.max_steps=50", "train.flush_every=1", run_dir=tmp_path / "run")
    assert result.code == 143 and result.summary["status"] == "interrupted"


def test_a_signal_after_the_command_ended_is_said_and_ignored(capfd):
    """What the command installs once its run (or sweep) has ended: every stop signal is said and ignored
    until the process exits; at the interpreter's exit they are left ignored (not put back to the default,
    which would kill it with 143)."""
    from normlab.train import signals

    signals.ignored_from_now("sweep")
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        os.kill(os.getpid(), s)
    err = capfd.readouterr().err
    assert err.count("received after the sweep ended: nothing to stop") == 3
    signals._ignore_while_exiting()
    assert all(signal.getsignal(s) == signal.SIG_IGN for s in signals.STOP_SIGNALS)


def argv(cache_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "train.py",
        *BASE,
        *SYNTHETIC,
        f"data.cache_dir={cache_dir}",
        "data.vocab_size=512",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


@pytest.mark.parametrize(
    ("names", "delay"),
    [
        (["SIGTERM"], 0.3),
        pytest.param(["SIGINT"], 0.0, marks=pytest.mark.slow),
        pytest.param(["SIGTERM", "SIGINT"], 0.8, marks=pytest.mark.slow),
        pytest.param(["SIGINT"], 1.5, marks=pytest.mark.slow),
    ],
)
def test_signals_just_after_a_real_run_completed(tmp_path, cache_dir, names, delay):
    """The issue's probe: SIGTERM in the ~1.6 s after "completed after" killed the command with 143
    (SIGINT: 130) while its summary said completed."""
    run_dir = tmp_path / "run"
    code, output = after_the_end(
        argv(cache_dir, run_dir),
        "completed after",
        [int(signal.Signals[n]) for n in names],
        delay,
        timeout_s=300,
    )
    assert code == 0 and "Traceback" not in output and "Exception ignored" not in output, output[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("gap", [0.02, 0.4, 1.0])
def test_ctrl_c_pressed_again_after_a_run_stopped_exits_130_without_a_traceback(tmp_path, cache_dir, gap):
    """On main a second Ctrl-C 0.3–1.2 s after the first killed the command silently, and a triple one 0.02 s
    apart printed `Exception ignored in atexit callback … KeyboardInterrupt`."""
    import subprocess
    import time

    from soak.processes import ROOT, default_signals, env

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, *argv(cache_dir, run_dir, "train.max_steps=100000")],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_signals,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "training from step" in line:
            break
    time.sleep(0.5)
    for _ in range(3):
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(gap)
    rest, _ = proc.communicate(timeout=300)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and "Exception ignored" not in output, output[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["joblib", "stacked"])
def test_signals_just_after_a_finished_sweep_ended(tmp_path, cache_dir, launcher):
    sweep = tmp_path / "sweep"
    base = argv(cache_dir, tmp_path / "unused")[1:-1]
    command = ["train.py", "-m", *base, "seed=0,1", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}"]
    for delay in (0.1, 0.8):
        code, output = after_the_end(
            command + (["train.resume=auto"] if sweep.exists() else []),
            "jobs done",
            [signal.SIGTERM, signal.SIGINT],
            delay,
            timeout_s=600,
        )
        assert code == 0 and "Traceback" not in output, output[-3000:]
