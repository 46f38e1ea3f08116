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


def test_a_bug_before_the_run_exists_still_leaves_a_crashed_summary(train_cli, tmp_path, monkeypatch):
    """Issue 39, point 9: a job whose set-up crashes (as the stacked launcher's `n_jobs: auto` did, in
    cli.threads_for_job, before a Run existed) leaves summary.json `crashed` with the traceback, as
    docs/errors.md says of every crash."""
    import normlab.cli

    def bug(*args, **kwargs):
        raise ValueError("invalid literal for int() with base 10: 'auto'")

    monkeypatch.setattr(normlab.cli, "threads_for_job", bug)
    sweep = tmp_path / "sweep"
    result = train_cli("-m", "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert result.code == 1, result.output[-3000:]
    assert "invalid literal for int()" in result.output  # the traceback on the console, as before
    for run_dir in sorted(p for p in sweep.iterdir() if (p / ".hydra").is_dir()):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "crashed", summary
        assert summary["reason"] == "ValueError: invalid literal for int() with base 10: 'auto'"
        assert "Traceback" in summary["traceback"] and "threads_for_job" not in summary["reason"]
        assert summary["seed"] in (0, 1)  # what ran is named as in any summary


def test_a_bug_before_a_stack_starts_leaves_each_member_a_crashed_summary(tmp_path, make_cfg, monkeypatch):
    """The same for a stacked group (normlab.sweeps.stacked.run_stacked_jobs): every member's summary.json says crashed."""
    from normlab.sweeps.stacked import StackedJob, run_stacked_jobs
    from normlab.train.stacked import run as stacked_run

    def bug(self):
        raise RuntimeError("a bug in the stack")

    monkeypatch.setattr(stacked_run.StackedRun, "execute", bug)
    jobs = [
        StackedJob(i, make_cfg(f"seed={i}"), make_cfg(f"seed={i}"), tmp_path / f"{i}", [f"seed={i}"])
        for i in range(2)
    ]
    outcomes = run_stacked_jobs(jobs)
    assert all(isinstance(o, RuntimeError) and o.normlab_crash for o in outcomes)
    for job in jobs:
        summary = json.loads((job.run_dir / "summary.json").read_text())
        assert summary["status"] == "crashed" and summary["reason"] == "RuntimeError: a bug in the stack"
        assert "Traceback" in summary["traceback"]
