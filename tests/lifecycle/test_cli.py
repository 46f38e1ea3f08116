"""train.py's endings beyond the table of docs/errors.md: a bug, a sweep with a failed job, W&B only once training starts."""

from __future__ import annotations

import json

from normlab.model import GPT


def test_a_bug_is_crashed_with_its_traceback_kept(train_cli, monkeypatch):
    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug in the formula")

    monkeypatch.setattr(GPT, "formula", bug)  # the model states its formula when the run starts
    result = train_cli()
    assert result.code == 1
    assert "Traceback" in result.output and "ZeroDivisionError: a bug in the formula" in result.output
    summary = result.summary
    assert summary["status"] == "crashed" and summary["reason"] == "ZeroDivisionError: a bug in the formula"
    assert (
        "Traceback" in summary["traceback"] and "in log_model" not in summary["reason"]
    )  # the sentence, not the traceback


def test_a_run_that_fails_before_training_opens_no_wandb_run(train_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = train_cli("logger=wandb", "data=text", f"data.path={tmp_path / 'missing'}")
    assert result.code == 2 and result.summary["status"] == "failed"
    assert not (result.run_dir / "wandb").exists() and "wandb sync" not in result.output


def test_a_sweep_goes_on_past_a_failed_job_and_exits_2(train_cli, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text(
        "\n\n".join(f"Story {i}: the cat sat on the mat and looked at the moon." for i in range(200))
    )
    sweep = tmp_path / "sweep"
    result = train_cli(
        "-m", "data=text", f"data.path={tmp_path / 'missing'},{good}", f"hydra.sweep.dir={sweep}"
    )
    assert result.code == 2, result.output[-3000:]
    assert "Traceback" not in result.output
    statuses = [
        json.loads((sweep / job / "summary.json").read_text())["status"]
        for job in sorted(p.name for p in sweep.iterdir() if (p / "summary.json").exists())
    ]
    assert statuses == ["failed", "completed"]
    assert "[sweep] not finished: 1 failed, 1 completed" in result.output
    assert "— failed: data.path=" in result.output and "continue the sweep with: " in result.output
