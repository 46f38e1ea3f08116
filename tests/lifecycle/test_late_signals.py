"""A run whose summary.json is written stays as it ended, whatever signals come after (issue 29, finding 7):
two or three signals while its sample is written, or one while the command winds down, leave a completed
run completed, with its sample, and the command exits 0."""

from __future__ import annotations

import os
import signal

import pytest


@pytest.mark.parametrize(
    "count", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 3]
)
def test_signals_while_the_sample_is_written(train_cli, tmp_path, monkeypatch, count):
    import normlab.train.run as run_mod

    real = run_mod.generate

    def generate(*args, **kwargs):
        for _ in range(count):
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_mod, "generate", generate)
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
