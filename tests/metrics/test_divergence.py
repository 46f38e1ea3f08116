"""The divergence rules, alone and ending real runs."""

from __future__ import annotations

import json

import pytest

from normlab.metrics.divergence import DivergenceConfig, DivergenceRule
from normlab.train.run import Run


def test_non_finite_loss_or_gradient_diverges_at_once():
    rule = DivergenceRule(DivergenceConfig.from_config())
    assert rule.check(0, 5.0, 1.0) is None
    assert "loss became nan" in rule.check(1, float("nan"), 1.0)
    assert "gradient norm became inf" in DivergenceRule(DivergenceConfig.from_config()).check(
        3, 5.0, float("inf")
    )


def test_loss_above_the_ratio_for_patience_steps():
    rule = DivergenceRule(DivergenceConfig.from_config(max_loss_ratio=2.0, patience=3))
    losses = [4.0, 5.0, 8.5, 9.0, 7.9, 8.1, 8.2, 8.3]  # limit 8.0: a streak of 2, a dip, then 3
    verdicts = [rule.check(step, loss, 1.0) for step, loss in enumerate(losses)]
    assert verdicts[:7] == [None] * 7
    assert "from step 5 to step 7" in verdicts[7] and "2 × the initial loss (4.000)" in verdicts[7]


def test_ratio_rule_off():
    rule = DivergenceRule(DivergenceConfig.from_config(max_loss_ratio=None, patience=1))
    assert all(rule.check(s, 1e6 if s else 1.0, 1.0) is None for s in range(5))


def test_state_round_trip():
    a = DivergenceRule(DivergenceConfig.from_config(max_loss_ratio=2.0, patience=3))
    for step, loss in enumerate([4.0, 9.0, 9.0]):
        a.check(step, loss, 1.0)
    b = DivergenceRule(DivergenceConfig.from_config(max_loss_ratio=2.0, patience=3))
    b.load_state_dict(a.state_dict())
    assert b.check(3, 9.0, 1.0) is not None


def test_huge_learning_rate_ends_as_diverged_with_history(make_cfg, tmp_path):
    summary = Run(
        make_cfg("optim.lr=1e5", "warmup_steps=0", "train.grad_clip=0", "norm=none", "train.max_steps=40"),
        tmp_path,
    ).execute()
    assert summary["status"] == "diverged" and summary["diverged_at"] < 40
    assert summary["reason"].endswith(".")
    report = json.loads((tmp_path / "divergence.json").read_text())
    assert report["step"] == summary["diverged_at"] and report["reason"] == summary["reason"]
    assert report["history"][-1]["step"] == summary["diverged_at"] and report["history"][-1]["batch_starts"]
    assert (tmp_path / "checkpoints" / "last.pt").exists()


def test_loss_ratio_rule_ends_a_run(make_cfg, tmp_path):
    # every loss is above 0.5 × the initial loss: the third step exhausts a patience of 3
    summary = Run(
        make_cfg("divergence.max_loss_ratio=0.5", "divergence.patience=3", "train.max_steps=10"), tmp_path
    ).execute()
    assert (summary["status"], summary["diverged_at"], summary["steps"]) == ("diverged", 2, 2)
    assert "stayed above 0.5 × the initial loss" in summary["reason"]


@pytest.mark.parametrize("patience", [1])
def test_diverged_rows_end_the_metrics_file(make_cfg, tmp_path, patience):
    Run(make_cfg("divergence.max_loss_ratio=0.5", f"divergence.patience={patience}"), tmp_path).execute()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]
