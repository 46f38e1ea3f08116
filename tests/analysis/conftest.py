"""Fabricated run and sweep directories with known values, written the way train.py writes them.

Nothing here trains: configs, metrics.jsonl rows and summary.json files are crafted, so every number the
analysis reports can be checked against a value chosen below.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from normlab.metrics import names
from normlab.summary import RunSummary

MAX_STEPS = 20
EVAL_EVERY = 10
EVERY = 5  # metrics.every: heavy metrics at these steps (and step 0)
DEPTH = 3
SPIKE_WINDOW = 4  # spikes.window: runs without spike_watch_start in summary.json were watched from here
INVALID_REASON = "norm=deepnorm is defined for placement=post only; use placement=post."


def config(norm: str, placement: str, seed: int, depth: int = DEPTH, warmup: int = 100) -> dict[str, Any]:
    """The composed config as train.py saves it: interpolations left unresolved."""
    return {
        "model": {
            "_target_": "normlab.model.GPT",
            "vocab_size": "${data.vocab_size}",
            "context_length": 64,
            "d_model": 64,
            "n_heads": 2,
            "n_layers": "${depth}",
            "norm": "${norm}",
            "placement": "${placement.name}",
            "dropout": 0.0,
            "init": "gpt2",
            "_convert_": "all",
        },
        # as in configs/norm: only some norms have a bias key, so model.norm.bias (${norm}) exists in some runs
        "norm": {"name": norm, "eps": 1.0e-5, **({"bias": True} if norm in ("ln", "deepnorm") else {})},
        "placement": {"name": placement},
        "schedule": {"name": "cosine"},
        "optim": {"name": "adamw", "lr": 0.003, "betas": [0.9, 0.95]},
        "train": {
            "batch_size": 8,
            "seq_len": "${model.context_length}",
            "max_steps": MAX_STEPS,
            "grad_clip": 1.0,
            "eval_every": EVAL_EVERY,
            "resume": None,
            "progress": "auto",
        },
        "data": {"name": "synthetic", "vocab_size": 512, "cache_dir": None},
        "metrics": {"every": EVERY},
        "spikes": {"window": SPIKE_WINDOW, "sigma": 6.0},
        "logger": {"name": "none"},
        "depth": depth,
        "warmup_steps": warmup,
        "seed": seed,
        "name": "${norm.name}-${placement.name}-L${depth}-w${warmup_steps}-s${seed}",
        "experiment_name": "default",
    }


def spec(
    norm,
    placement,
    seed,
    status="completed",
    *,
    depth=DEPTH,
    warmup=100,
    final_val=None,
    best_val=None,
    final_train=None,
    spikes=(),
    tokens_per_s=10000.0,
    n_params=1_234_567,
    diverged_at=None,
    instrumented=True,
    base=1.0,
    attn_scale=1.0,
    summary_extra=None,
    loss_at=None,  # {step: training loss} in place of the formula's value, e.g. a spike
    grad0=None,  # per-block gradient norms at step 0 in place of grad_layer's profile
) -> dict[str, Any]:
    return dict(locals())


def train_loss(s: dict, step: int) -> float:
    return 6.0 * s["base"] - 0.1 * step


def grad_layer(s: dict, step: int, i: int) -> float:
    # known per-layer profile: (i + 1) · base at step 0, slowly falling
    return (i + 1) * s["base"] / (1 + 0.05 * step)


def act_rms(s: dict, step: int, i: int) -> float:
    return s["base"] * (1 + i) * (1 + step / MAX_STEPS)


def layer_importance(s: dict, i: int) -> float:
    """The final evaluation's val loss with block i skipped, minus the val loss: falling with depth."""
    return 0.5 * s["base"] / (1 + i)


def write_run(run_dir: Path, s: dict[str, Any]) -> None:
    (run_dir / ".hydra").mkdir(parents=True)
    cfg = config(s["norm"], s["placement"], s["seed"], s["depth"], s["warmup"])
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    choices = {
        "logger": "none",
        "metrics": "default",
        "data": "synthetic",
        "train": "default",
        "optim": "adamw",
        "schedule": "cosine",
        "placement": s["placement"],
        "norm": s["norm"],
        "model": "tiny",
        "hydra/launcher": "basic",
    }
    (run_dir / ".hydra" / "hydra.yaml").write_text(
        yaml.safe_dump({"hydra": {"run": {"dir": "${now:%H}"}, "runtime": {"choices": choices}}})
    )
    name = f"{s['norm']}-{s['placement']}-L{s['depth']}-w{s['warmup']}-s{s['seed']}"
    # summary.json as the harness writes it: every field RunSummary declares (normlab.summary)
    summary = RunSummary().update(
        status=s["status"],
        norm=s["norm"],
        placement=s["placement"],
        depth=s["depth"],
        warmup_steps=s["warmup"],
        seed=s["seed"],
        name=name,
    )
    if s["status"] == "invalid":
        summary.update(reason=INVALID_REASON).write(run_dir)
        return
    last = s["diverged_at"] if s["status"] == "diverged" else MAX_STEPS - 1
    rows = []
    for step in range(last + 1):
        row: dict[str, Any] = {
            names.STEP: step,
            names.LR: 0.001,
            names.LOSS: (s["loss_at"] or {}).get(step, train_loss(s, step)),
            names.CLIPPED: 0,
            names.GRAD_NORM: 2.0 * s["base"] * (1 + step % 3),
            names.TOKENS_PER_S: s["tokens_per_s"],
        }
        for i in range(s["depth"]):
            row[names.grad_norm_layer(i)] = grad_layer(s, step, i)
            if step == 0 and s["grad0"] is not None:
                row[names.grad_norm_layer(i)] = s["grad0"][i]
            for part in names.SUBLAYERS:
                row[names.grad_norm_sublayer(i, part)] = grad_layer(s, step, i) / 2
        if s["instrumented"]:
            row[names.SPIKE_LOSS] = int(step in s["spikes"])
            row[names.SPIKE_GRAD_NORM] = 0
            if step % EVERY == 0:
                for i in range(s["depth"]):
                    row[names.act_rms_layer(i)] = act_rms(s, step, i)
                    row[names.attn_max_logit_layer(i)] = (2.0 + i + 0.1 * step) * s["attn_scale"]
                    row[names.update_ratio_layer(i)] = 1e-3 * (i + 1)
                    row[names.param_norm_layer(i)] = 10.0
                row[names.ACT_RMS_HEAD] = 1.0
                if s["placement"] == "post":
                    row[names.MODEL_UPDATE] = 0.1 * step * s["base"]
        if step and step % EVAL_EVERY == 0:
            row[names.VAL_LOSS] = train_loss(s, step) + 0.05
            row[names.VAL_PPL] = math.exp(row[names.VAL_LOSS])
        if step == last and s["status"] == "diverged":
            row[names.LOSS] = "nan"
            row[names.GRAD_NORM] = "inf"
        rows.append(row)
    if s["status"] == "completed":
        final = {
            names.STEP: MAX_STEPS,
            names.VAL_LOSS: s["final_val"],
            names.VAL_PPL: math.exp(s["final_val"]),
        }
        if s["instrumented"]:  # metrics.layer_ablation: the final evaluation with each block skipped
            for i in range(s["depth"]):
                final[names.layer_ablation(i)] = s["final_val"] + layer_importance(s, i)
        rows.append(final)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary.update(
        steps=last if s["status"] == "diverged" else MAX_STEPS,
        final_train_loss=s["final_train"],
        final_val_loss=s["final_val"] if s["status"] == "completed" else None,
        best_val_loss=s["best_val"],
        n_spikes=len(s["spikes"]),
        spike_steps=list(s["spikes"]),
        diverged_at=s["diverged_at"],
        tokens_per_s=s["tokens_per_s"],
        n_params=s["n_params"],
    )
    summary.update(**(s["summary_extra"] or {}))  # fields other parts of the harness add (learned, ...)
    summary.write(run_dir)


def write_sweep(root: Path, specs: list[dict[str, Any]]) -> Path:
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    for job, s in enumerate(specs):
        write_run(root / f"{job}_{s['norm']}-{s['placement']}-L{s['depth']}-w{s['warmup']}-s{s['seed']}", s)
    return root


# 2 variants (ln-pre, ln-post) × 2 seeds; ln-post seed 1 diverges at step 15; deepnorm-pre is invalid.
MAIN = [
    spec("ln", "pre", 0, final_val=2.50, best_val=2.48, final_train=2.40, tokens_per_s=10000.0, base=1.0),
    spec(
        "ln",
        "pre",
        1,
        final_val=2.70,
        best_val=2.65,
        final_train=2.60,
        spikes=(5, 12),
        tokens_per_s=12000.0,
        base=1.2,
    ),
    spec(
        "ln",
        "post",
        0,
        final_val=3.10,
        best_val=3.00,
        final_train=3.05,
        spikes=(8,),
        tokens_per_s=11000.0,
        base=1.1,
    ),
    spec(
        "ln",
        "post",
        1,
        "diverged",
        best_val=3.40,
        final_train=3.60,
        diverged_at=15,
        tokens_per_s=9000.0,
        base=1.3,
    ),
    spec("deepnorm", "pre", 0, "invalid"),
]


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Shared, read-only: tests that change files use `fresh_sweep`."""
    root = tmp_path_factory.mktemp("main") / "sweeps" / "2026-01-01" / "12-00-00_default"
    return SimpleNamespace(path=write_sweep(root, MAIN), specs=MAIN)


@pytest.fixture
def fresh_sweep(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(path=write_sweep(tmp_path / "sweep", MAIN), specs=MAIN)


@pytest.fixture(scope="session")
def bare_sweep(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Only the core harness's metrics: no activation, attention, update-ratio or spike metrics."""
    specs = [dict(s, instrumented=False) for s in MAIN[:3]]
    return SimpleNamespace(path=write_sweep(tmp_path_factory.mktemp("bare") / "sweep", specs), specs=specs)


GRID_VALUES = {(2, 0): (3.0, 3.2), (2, 100): (2.8, 2.9), (6, 0): (None, None), (6, 100): (2.6, None)}


@pytest.fixture(scope="session")
def grid_sweep(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """depth × warmup_steps with 2 seeds per cell, final val losses from GRID_VALUES (None = diverged):
    (depth 6, warmup 0) diverges in both seeds, (depth 6, warmup 100) in one."""
    specs = []
    for (depth, warmup), pair in GRID_VALUES.items():
        for seed, v in enumerate(pair):
            if v is None:
                specs.append(
                    spec(
                        "ln",
                        "post",
                        seed,
                        "diverged",
                        depth=depth,
                        warmup=warmup,
                        diverged_at=7,
                        final_train=5.0,
                    )
                )
            else:
                specs.append(
                    spec(
                        "ln", "post", seed, depth=depth, warmup=warmup, final_val=v, best_val=v, final_train=v
                    )
                )
    path = write_sweep(tmp_path_factory.mktemp("grid") / "sweep", specs)
    return SimpleNamespace(path=path, specs=specs, vals=GRID_VALUES)


@pytest.fixture(scope="session")
def fab() -> Any:
    """This module: its constants and value formulas (tests can't import a conftest under importlib mode)."""
    import sys

    return sys.modules[__name__]
