"""A start decides what train.resume does once: the command line's check before Hydra writes anything
(normlab.train.resume.admit) hands its decision to the run, which acts on it (issue 41)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from normlab.train import resume


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of `normlab.train.resume.decide` in this test, by the train.resume it decided."""
    calls: list[str] = []
    real: Callable[..., resume.Decision] = resume.decide

    def counted(cfg: Any, run_dir: Any, **kwargs: Any) -> resume.Decision:
        calls.append(str(cfg["train"].get("resume")))
        return real(cfg, run_dir, **kwargs)

    monkeypatch.setattr(resume, "decide", counted)
    return calls


def test_a_fresh_auto_start_decides_once(train_cli, tmp_path, decisions):
    result = train_cli("train.resume=auto", run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    assert result.summary["status"] == "completed" and result.summary["steps"] == 3
    assert decisions == ["auto"]
    assert "train.resume=auto: " in result.output  # what deciding says is said once, by the run
    assert result.output.count("train.resume=auto: ") == 1


def test_a_resume_of_a_saved_run_decides_once_and_says_it_once(train_cli, tmp_path, decisions):
    first = train_cli("train.max_steps=2", run_dir=tmp_path / "run")
    assert first.code == 0, first.output[-2000:]
    decisions.clear()
    result = train_cli("train.max_steps=4", "train.resume=auto", run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    assert decisions == ["auto"]  # admit decided before Hydra wrote; the run took its decision
    summary = result.summary
    assert summary["status"] == "completed" and summary["steps"] == 4
    assert summary["resumed_from"].endswith("(step 2)")
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2, 3]
    assert result.output.count("train.resume=auto: ") == 1  # held when decided, said by the run
    assert "resumed from" in result.output


def test_a_finished_run_is_skipped_on_one_decision(train_cli, tmp_path, decisions):
    first = train_cli(run_dir=tmp_path / "run")
    assert first.code == 0, first.output[-2000:]
    before = (tmp_path / "run" / "summary.json").read_bytes()
    decisions.clear()
    result = train_cli("train.resume=auto", run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-2000:]
    assert decisions == ["auto"]
    assert (tmp_path / "run" / "summary.json").read_bytes() == before
