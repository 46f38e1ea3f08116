"""How long a finding's sweeps take on this machine's CPU cores, before running them (what
`scripts/reproduce.py` prints first): jobs × (steps × step time + evaluations + start-up), divided over the
cores.

The step time of the presets' tiny models is calibrated on this project's 2-core machine (one thread per
job, joblib's reused workers, no other load): STEP_S_HEAD for the embedding, head and optimizer at batch
16 × 64 tokens with the 1,024-token vocabulary, STEP_S_PER_BLOCK per block, a forward (evaluation, the
layer-ablation probe) about a third of a step, JOB_S to start and finish a job. Steps scale with the
tokens of a batch and the width squared. Other processes on the cores make it longer: the estimate says
so rather than guessing the load.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import OmegaConf

STEP_S_PER_BLOCK, STEP_S_HEAD, JOB_S = 0.011, 0.008, 2.5
FORWARD_SHARE = 1 / 3  # a forward pass as a share of a training step
REFERENCE_TOKENS, REFERENCE_WIDTH = 16 * 64, 64


@dataclass(frozen=True)
class SweepCost:
    """The jobs of one sweep and their single-core seconds."""

    jobs: int
    core_s: float  # summed over the jobs, one thread each


def jobs_of(cfg, overrides: Sequence[str] = ()) -> list[dict[str, str]]:
    """The sweep's jobs, as Hydra launches `-m +experiment=… OVERRIDES`: the cartesian product of
    hydra.sweeper.params, where an override of a swept key replaces its values and any other override
    applies to every job; combinations the model does not define (deepnorm off post) are left out, as a
    sweep skips them at once."""
    from normlab.model.norms import RECIPES
    from normlab.model.variant import InvalidVariant, check_variant

    params = OmegaConf.to_container(cfg.hydra.sweeper.params) if "hydra" in cfg else {}
    params = {k: str(v).split(",") for k, v in (params or {}).items()}
    for override in overrides:
        key, _, value = override.partition("=")
        if key and not key.startswith(("hydra", "+", "~")):
            params[key] = value.split(",")
    keys = list(params)
    jobs = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*params.values())]
    out = []
    for job in jobs:
        norm = job.get("norm", OmegaConf.select(cfg, "norm.name"))
        norm = RECIPES[norm][0] if norm in RECIPES else norm
        placement = job.get("placement", OmegaConf.select(cfg, "placement.name"))
        try:
            check_variant(norm, placement)
        except InvalidVariant:
            continue
        out.append(job)
    return out


def _value(cfg, job: dict[str, str], key: str, default):
    if key in job:
        return job[key]
    node = OmegaConf.select(cfg, key)
    return default if node is None else node


def job_seconds(cfg, job: dict[str, str]) -> float:
    """Single-thread seconds of one job of the sweep `cfg` (a composed preset)."""
    depth = int(_value(cfg, job, "depth", cfg.depth))
    width = int(_value(cfg, job, "model.d_model", cfg.model.d_model))
    batch = int(_value(cfg, job, "train.batch_size", cfg.train.batch_size))
    seq = int(_value(cfg, job, "train.seq_len", cfg.train.seq_len))
    accum = int(_value(cfg, job, "train.grad_accum", cfg.train.grad_accum))
    steps = int(_value(cfg, job, "train.max_steps", cfg.train.max_steps))
    every = int(_value(cfg, job, "train.eval_every", cfg.train.eval_every))
    eval_batches = int(cfg.train.eval_batches)
    scale = (batch * seq / REFERENCE_TOKENS) * (width / REFERENCE_WIDTH) ** 2
    step = (STEP_S_HEAD + STEP_S_PER_BLOCK * depth) * scale
    train = max(steps, 1) * accum * step
    evaluations = (steps // every if every else 0) + 1 + int(bool(cfg.train.eval_at_start))
    forwards = eval_batches * (1 + (depth if bool(cfg.metrics.get("layer_ablation", False)) else 0))
    evaluate = evaluations * forwards * FORWARD_SHARE * step * (REFERENCE_TOKENS / (batch * seq))
    return JOB_S + train + evaluate


def sweep_cost(preset: str, overrides: Sequence[str] = ()) -> SweepCost:
    """The jobs and single-core seconds of `python train.py -m +experiment=PRESET OVERRIDES…`."""
    from normlab.config.compose import compose_config

    cfg = compose_config([f"+experiment={preset}"], hydra=True)
    jobs = jobs_of(cfg, overrides)
    return SweepCost(len(jobs), sum(job_seconds(cfg, j) for j in jobs))


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
