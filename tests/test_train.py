"""End to end through the real config tree: every variant trains, invalid ones are recorded, resume, files."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate

from normlab.metrics import names
from normlab.model import NORMS, PLACEMENTS
from normlab.summary import FIELD_NAMES
from normlab.train.run import Run

# every norm with pre and post, and every placement with ln and with deepnorm (invalid but for post) by
# default; the rest of the 7 × 7 grid with the slow tests
COMBOS = [
    pytest.param(n, p, marks=() if p in ("pre", "post") or n in ("ln", "deepnorm") else pytest.mark.slow)
    for n in NORMS
    for p in PLACEMENTS
]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_cfg_model_instantiates_the_gpt(make_cfg):
    import torch

    cfg = make_cfg("norm=rms", "placement=double", "depth=3")
    model = instantiate(cfg.model)
    assert isinstance(model, torch.nn.Module)
    assert model.n_layers == 3 and model.norm_name == "rms" and model.placement == "double"
    assert model(torch.randint(0, 512, (2, 10))).shape == (2, 10, 512)


@pytest.mark.parametrize(("norm", "placement"), COMBOS)
def test_every_combination_trains_or_is_invalid(make_cfg, tmp_path, norm, placement):
    summary = Run(make_cfg(f"norm={norm}", f"placement={placement}"), tmp_path).execute()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary.keys() == FIELD_NAMES  # every declared field, nothing undeclared
    if norm == "deepnorm" and placement != "post":  # the one norm restricted to some placements
        assert summary["status"] == "invalid"
        assert "placement=post" in summary["reason"] and summary["reason"].endswith(".")
        assert not (tmp_path / "metrics.jsonl").exists()
        return
    assert summary["status"] == "completed", summary
    assert summary["steps"] == 3
    assert (norm, placement, 2) == (summary["norm"], summary["placement"], summary["depth"])
    assert math.isfinite(summary["final_val_loss"])


def test_metrics_file_has_the_documented_keys(make_cfg, tmp_path):
    Run(make_cfg("train.eval_every=2", "train.max_steps=4"), tmp_path).execute()
    table = rows(tmp_path)
    train_rows = [r for r in table if names.LOSS in r]
    assert [r[names.STEP] for r in train_rows] == [0, 1, 2, 3]
    for r in train_rows:
        for key in (names.LOSS, names.LR, names.GRAD_NORM, names.TOKENS_PER_S, names.CLIPPED):
            assert key in r
        for i in range(2):
            assert names.grad_norm_layer(i) in r
            for part in names.SUBLAYERS:
                assert names.grad_norm_sublayer(i, part) in r
    # step 0 is measured before any update, with lr of the first warmup step (lr · 1/warmup)
    assert train_rows[0][names.LR] == pytest.approx(3e-3 / 2)
    evals = {r[names.STEP]: r for r in table if names.VAL_LOSS in r}
    assert sorted(evals) == [2, 4]  # no evaluation at step 0 unless train.eval_at_start asks for it
    assert evals[4][names.VAL_PPL] == pytest.approx(math.exp(evals[4][names.VAL_LOSS]))


def test_the_first_steps_are_measured_densely_then_every_few(make_cfg, tmp_path):
    """Instabilities live in the first steps: every one up to metrics.dense_until is instrumented."""
    Run(make_cfg("train.max_steps=14", "metrics.every=5", "metrics.dense_until=6"), tmp_path).execute()
    steps = [r[names.STEP] for r in rows(tmp_path) if names.act_rms_layer(0) in r and names.LOSS in r]
    assert steps == [0, 1, 2, 3, 4, 5, 6, 10]


def test_eval_at_start_adds_the_step_0_evaluation(make_cfg, tmp_path):
    Run(make_cfg("train.eval_every=2", "train.max_steps=4", "train.eval_at_start=true"), tmp_path).execute()
    assert sorted(r[names.STEP] for r in rows(tmp_path) if names.VAL_LOSS in r) == [0, 2, 4]


def test_eval_at_adds_evaluations_at_those_steps(make_cfg, tmp_path):
    """train.eval_at: evaluations before the steps it lists, besides eval_every's and the final one; each is
    the same evaluation (the same windows), so the rows' val_loss is what Trainer.evaluate says then."""
    Run(make_cfg("train.eval_every=4", "train.max_steps=6", "train.eval_at=[1,3,4]"), tmp_path).execute()
    table = rows(tmp_path)
    assert sorted({r[names.STEP] for r in table if names.VAL_LOSS in r}) == [1, 3, 4, 6]
    by_step = {r[names.STEP]: r for r in table if names.LOSS in r}
    assert names.VAL_LOSS not in by_step[2] and names.VAL_LOSS in by_step[3]
    assert by_step[3][names.VAL_PPL] == pytest.approx(math.exp(by_step[3][names.VAL_LOSS]))
    Run(make_cfg("train.max_steps=2", "train.eval_at=[0]"), tmp_path / "start").execute()
    assert sorted(r[names.STEP] for r in rows(tmp_path / "start") if names.VAL_LOSS in r) == [0, 2]


def test_layer_norms_add_up_to_the_global_norm(make_cfg, tmp_path):
    Run(make_cfg("depth=3"), tmp_path).execute()
    first = rows(tmp_path)[0]
    blocks_sq = sum(first[names.grad_norm_layer(i)] ** 2 for i in range(3))
    parts_sq = sum(first[names.grad_norm_sublayer(i, p)] ** 2 for i in range(3) for p in names.SUBLAYERS)
    assert parts_sq == pytest.approx(blocks_sq, rel=1e-4)
    assert blocks_sq < first[names.GRAD_NORM] ** 2  # embeddings (and the final norm) are outside the blocks


@pytest.mark.parametrize("eval_at_start", [False, True])
def test_max_steps_zero_measures_the_init_profile_only(make_cfg, tmp_path, eval_at_start):
    summary = Run(make_cfg("train.max_steps=0", f"train.eval_at_start={eval_at_start}"), tmp_path).execute()
    table = rows(tmp_path)
    assert summary["status"] == "completed" and summary["steps"] == 0
    assert len(table) == 1 and table[0][names.STEP] == 0
    assert names.GRAD_NORM in table[0]
    assert (names.VAL_LOSS in table[0]) == eval_at_start


def test_loss_falls_clearly(make_cfg, tmp_path):
    summary = Run(
        make_cfg("train.max_steps=120", "train.eval_every=0", "optim.lr=3e-3", "warmup_steps=10"), tmp_path
    ).execute()
    first = rows(tmp_path)[0][names.LOSS]
    assert first == pytest.approx(math.log(512), abs=0.5)  # uniform prediction at init
    assert summary["final_train_loss"] < first - 1.5
    assert (tmp_path / "sample.txt").read_text().startswith("Once upon a time")


def test_resume_continues_the_same_run(make_cfg, tmp_path):
    straight, first, resumed = tmp_path / "straight", tmp_path / "first", tmp_path / "resumed"
    Run(make_cfg("train.max_steps=6"), straight).execute()
    Run(make_cfg("train.max_steps=6", "train.ckpt_every=3"), first).execute()
    ckpt = first / "checkpoints" / "step_000003.pt"
    assert ckpt.exists() and (first / "checkpoints" / "last.pt").exists()
    summary = Run(make_cfg("train.max_steps=6", f"train.resume={ckpt}"), resumed).execute()
    assert summary["steps"] == 6
    continued = [r for r in rows(resumed) if names.LOSS in r]
    assert [r[names.STEP] for r in continued] == [3, 4, 5]
    reference = {r[names.STEP]: r for r in rows(straight) if names.LOSS in r}
    for r in continued:  # same data, same RNG, same optimizer state: the same numbers
        assert r[names.LOSS] == pytest.approx(reference[r[names.STEP]][names.LOSS], rel=1e-5)


def test_a_resumed_runs_final_train_loss_is_that_of_its_rows(make_cfg, tmp_path):
    """One source for the training loss: after a resume in place, summary.json's final_train_loss is the mean
    of the last 10 losses metrics.jsonl holds, rows of both processes."""
    Run(make_cfg("train.max_steps=6"), tmp_path).execute()
    summary = Run(make_cfg("train.max_steps=14", "train.resume=auto"), tmp_path).execute()
    losses = [r[names.LOSS] for r in rows(tmp_path) if names.LOSS in r]
    assert summary["steps"] == 14 and len(losses) == 14
    assert summary["final_train_loss"] == pytest.approx(sum(losses[-10:]) / 10, rel=1e-12)


def test_non_finite_loss_ends_as_diverged(make_cfg, tmp_path):
    summary = Run(
        make_cfg(
            "optim.lr=1e6",
            "warmup_steps=0",
            "train.grad_clip=0",
            "train.max_steps=30",
            "norm=none",
            "train.flush_every=1",
        ),
        tmp_path,
    ).execute()
    assert summary["status"] == "diverged"
    assert summary["diverged_at"] is not None and summary["diverged_at"] < 30
    last = rows(tmp_path)[-1]
    assert last[names.STEP] == summary["diverged_at"]


def test_unwritable_run_dir_is_one_sentence(make_cfg, tmp_path):
    from normlab.errors import UserError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="writable"):
        Run(make_cfg(), blocker / "run").execute()


def test_multirun_records_invalid_jobs_goes_on_and_exits_2(cache_dir, tmp_path, tiny_overrides, repo_root):
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "train.py",
        "-m",
        *tiny_overrides,
        f"data.cache_dir={cache_dir}",
        "norm=ln,deepnorm",
        "placement=pre",
        f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.run(
        cmd,
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]  # the sweep finished, and says a job was invalid
    statuses = sorted(json.loads(p.read_text())["status"] for p in sweep.glob("*/summary.json"))
    assert statuses == ["completed", "invalid"]
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[sweep]")]
    assert len(progress) == 3 and progress[0].startswith("[sweep] 1/2 done")
    assert progress[1].startswith("[sweep] 2/2 done") and progress[1].endswith("all done")
    assert progress[2] == f"[sweep] finished: 1 completed, 1 invalid — {sweep}"
    assert "#1 norm=deepnorm — invalid: norm=deepnorm is defined only for placement=post" in proc.stderr
    assert "continue the sweep with" not in proc.stderr  # an invalid value needs a new command
