"""Fabricated sweeps with chosen numbers, written the way train.py writes runs, for the verdict tests.

Each helper returns a sweep directory whose runs differ in the config keys a finding looks at; the
values that decide a verdict (final losses, gradient profiles, activation RMS, …) are given by the test.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

from normlab.metrics import names

UNIGRAM = 5.74  # the embedded corpus's unigram loss at vocabulary 1024

BASE: dict[str, Any] = {
    "model": {
        "d_model": 64,
        "n_heads": 4,
        "init": "gpt2",
        "embed_scale": 1.0,
        "tie_embeddings": True,
        "n_layers": "${depth}",
    },
    "norm": {"name": "ln"},
    "placement": {"name": "pre"},
    "schedule": {"name": "cosine"},
    "optim": {"lr": 0.003, "z_loss": 0.0},
    "train": {"batch_size": 16, "seq_len": 64, "max_steps": 100, "grad_clip": 1.0},
    "data": {"name": "synthetic", "vocab_size": 1024},
    "logger": {"name": "none"},
    "depth": 6,
    "warmup_steps": 30,
    "seed": 0,
    "name": "${norm.name}-${placement.name}-L${depth}-w${warmup_steps}-s${seed}",
    "experiment_name": "crafted",
}


def _set(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    node = cfg
    *parents, last = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def write_run(
    run_dir: Path,
    config: dict[str, Any],
    *,
    status: str = "completed",
    final_val: float | None = 3.0,
    val0: float = 7.0,
    rows: list[dict[str, Any]] | None = None,
    summary: dict[str, Any] | None = None,
    unigram: float | None = UNIGRAM,
) -> Path:
    """One run directory: `config` holds dotted overrides of BASE; `rows` extra metrics rows; `unigram`
    the corpus's unigram loss written as baseline_unigram_loss (None: a run from before it existed)."""
    cfg = copy.deepcopy(BASE)
    for k, v in config.items():
        _set(cfg, k, v)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    max_steps = cfg["train"]["max_steps"]
    table = {0: {names.STEP: 0, names.LOSS: val0, names.VAL_LOSS: val0, names.TOKENS_PER_S: 1000.0}}
    for r in rows or []:
        table.setdefault(int(r[names.STEP]), {names.STEP: int(r[names.STEP])}).update(r)
    if status == "completed" and final_val is not None:
        table.setdefault(max_steps, {names.STEP: max_steps})[names.VAL_LOSS] = final_val
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(table[s]) + "\n" for s in sorted(table)))
    out = {
        "status": status,
        "steps": max_steps,
        "final_train_loss": final_val,
        "final_val_loss": final_val if status == "completed" else None,
        "best_val_loss": final_val,
        "n_spikes": 0,
        "spike_steps": [],
        "diverged_at": 10 if status == "diverged" else None,
        "tokens_per_s": 1000.0,
        "n_params": 100000,
        "norm": cfg["norm"]["name"],
        "placement": cfg["placement"]["name"],
        "depth": cfg["depth"],
        "warmup_steps": cfg["warmup_steps"],
        "seed": cfg["seed"],
    }
    if unigram is not None:
        out["baseline_unigram_loss"] = unigram
    out.update(summary or {})
    (run_dir / "summary.json").write_text(json.dumps(out))
    return run_dir


class Sweep:
    """A sweep directory filled run by run: `sweep.add({"placement.name": "post", "seed": 1}, final_val=4)`."""

    def __init__(self, root: Path, experiment: str) -> None:
        self.root = root
        self.experiment = experiment
        self.n = 0
        root.mkdir(parents=True, exist_ok=True)

    def add(self, config: dict[str, Any], **kw: Any) -> Path:
        config = {"experiment_name": self.experiment, **config}
        path = write_run(self.root / f"{self.n}_run", config, **kw)
        self.n += 1
        return path


def warmup_sweep(root: Path, losses: dict[tuple[str, int], list[float]], diverged=()) -> Path:
    """Finding 2: losses[(placement, warmup)] = final val loss per seed."""
    sweep = Sweep(root, "xiong_warmup")
    for (placement, warmup), per_seed in losses.items():
        for seed, loss in enumerate(per_seed):
            status = "diverged" if (placement, warmup, seed) in diverged else "completed"
            sweep.add(
                {"placement.name": placement, "warmup_steps": warmup, "seed": seed},
                final_val=loss,
                status=status,
            )
    return root


def grad_profile_sweep(
    root: Path, last_grad, depths=(2, 6, 12, 24), seeds=(0, 1, 2), inits=("xavier", "gpt2")
) -> Path:
    """Finding 1: step-0 rows only; `last_grad(init, placement, depth, seed, layer)` gives each block's norm."""
    sweep = Sweep(root, "xiong_grad_profile")
    for init in inits:
        for placement in ("pre", "post"):
            for depth in depths:
                for seed in seeds:
                    row = {
                        names.STEP: 0,
                        **{
                            names.grad_norm_layer(i): last_grad(init, placement, depth, seed, i)
                            for i in range(depth)
                        },
                    }
                    sweep.add(
                        {
                            "model.init": init,
                            "placement.name": placement,
                            "depth": depth,
                            "seed": seed,
                            "train.max_steps": 0,
                            "warmup_steps": 0,
                        },
                        final_val=None,
                        rows=[row],
                        summary={"steps": 0},
                    )
    return root


def act_rms_sweep(root: Path, profile, depth: int = 6, seeds=(0, 1, 2), end: int = 100) -> Path:
    """Finding 4: act_rms/layer_i at step 0 and `end` from `profile(placement, step, layer, seed)`."""
    sweep = Sweep(root, "periln_act_growth")
    for placement in ("pre", "double"):
        for seed in seeds:
            rows = [
                {
                    names.STEP: step,
                    **{names.act_rms_layer(i): profile(placement, step, i, seed) for i in range(depth)},
                }
                for step in (0, end // 2, end)
            ]
            sweep.add(
                {"placement.name": placement, "depth": depth, "seed": seed, "train.max_steps": end + 1},
                rows=rows,
            )
    return root


def rms_sweep(
    root: Path,
    losses: dict[str, list[float]],
    log_ratio: float,
    se: float,
    device: str | None = "cuda",
    share: float = 0.2,
) -> Path:
    """Finding 5: final losses per norm, a crafted CPU profile_norm.json and a crafted norm_share.json on
    `device` (None: none) with LayerNorm's norm share `share` and ABBA log(t_LN / t_RMS) `log_ratio` ± se."""
    sweep = Sweep(root, "rmsnorm_speed")
    for norm, per_seed in losses.items():
        for seed, loss in enumerate(per_seed):
            sweep.add({"norm.name": norm, "seed": seed}, final_val=loss)
    n = 8
    ratios = [log_ratio + se * math.sqrt(n) * (1 if i % 2 else -1) * math.sqrt((n - 1) / n) for i in range(n)]
    profile = {
        "norms": ["ln", "rms"],
        "threads": 1,
        "torch": "x",
        "model": {
            "d_model": 64,
            "n_heads": 4,
            "depth": 6,
            "placement": "pre",
            "batch_size": 16,
            "seq_len": 64,
        },
        "timing": {
            "order": "crafted",
            "step_s": {"ln": [0.1] * n, "rms": [0.1 * math.exp(-log_ratio)] * n},
            "log_ratio": ratios,
            "log_ratio_mean": log_ratio,
            "log_ratio_se": se,
        },
        "profile": {
            norm: {"step_ms": 100.0, "norm_forward_ms": 2.0, "norm_backward_ms": 3.0, "norm_share": 0.05}
            for norm in ("ln", "rms")
        },
        "flops": {norm: {"norm_flop_share": 0.01} for norm in ("ln", "rms")},
    }
    (root / "profile_norm.json").write_text(json.dumps(profile))
    if device is not None:
        shares = [share + 0.005 * (1 if i % 2 else -1) for i in range(n)]
        speed = {
            "device": device,
            "device_name": "crafted",
            "torch": "x",
            "precision": "fp32",
            "threads": 1,
            "model": profile["model"],
            "norm_calls_per_step": 13,
            "share": shares,
            "step_s": {"ln": [0.1] * n, "rms": [0.1 * math.exp(-log_ratio)] * n},
            "log_ratio": ratios,
            "order": "crafted",
        }
        (root / "norm_share.json").write_text(json.dumps(speed))
    return root
