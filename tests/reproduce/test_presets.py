"""Every experiment preset composes with `+experiment=NAME`, launches with joblib, and trains 2 steps."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from normlab.analysis.findings import CORE, FINDINGS
from normlab.train.run import Run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


def compose_preset(name: str, overrides=(), hydra: bool = False):
    with initialize_config_dir(str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={name}", *overrides], return_hydra_config=hydra)


@cache
def preset(name: str):
    """The preset as Hydra composes it, hydra node included (composed once per session)."""
    return compose_preset(name, hydra=True)


def sweep_params(cfg) -> dict[str, list[str]]:
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    return {k: str(v).split(",") for k, v in params.items()}


def test_one_preset_per_finding():
    assert sorted(FINDINGS) == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_composes(name):
    text = (CONFIGS / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_")
    cfg = preset(name)
    assert cfg.experiment_name == name
    assert cfg.logger.name == "none"
    assert cfg.data.name == "synthetic"
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("JoblibLauncher")
    assert launcher.n_jobs == -1  # one job per core
    params = sweep_params(cfg)
    assert params, "a preset sweeps something"
    assert all(len(v) >= 2 for v in params.values())
    # jobs that a verdict needs a noise estimate from: at least two seeds (finding 1 needs none, but has 3)
    assert len(params.get("seed", [])) >= 2


def test_core_presets_fit_the_time_budget():
    """The core set must run in 15 minutes on 2 cores: bound its work in (job × step × block) units.

    Calibration (this repository's machine, 1 thread): a tiny model step at batch 16 × 64 tokens costs
    about 11 ms per block plus 8 ms of embedding/head with the presets' 1024-token vocabulary."""
    work_s = 0.0
    for name in CORE:
        cfg = preset(name)
        params = sweep_params(cfg)
        jobs = 1
        for values in params.values():
            jobs *= len(values)
        depths = [int(d) for d in params.get("depth", [cfg.depth])]
        steps = max(int(cfg.train.max_steps), 1)
        tokens = int(cfg.train.batch_size) * int(cfg.train.seq_len) / (16 * 64)
        per_step = tokens * (0.008 + 0.011 * sum(depths) / len(depths))
        work_s += jobs * (steps * per_step + 1.0)  # + about a second per job to start and evaluate
    assert work_s / 2 < 10 * 60, f"core set ≈ {work_s / 2 / 60:.1f} min of pure compute on 2 cores"


@pytest.mark.parametrize("name", PRESETS)
def test_preset_trains_two_steps(name, tiny, tmp_path):
    """One job of the preset's sweep — for each swept key its first value that is not the preset's
    default (deepnorm, rms, double, bn, sqrt_d, xavier, …) — with the tiny overrides and 2 steps."""
    cfg = preset(name)
    tiny_keys = {o.split("=")[0] for o in tiny}
    job = []
    for k, vals in sweep_params(cfg).items():
        if k in tiny_keys:
            continue
        node = OmegaConf.select(cfg, k)
        default = node.name if hasattr(node, "name") else node  # a group (norm=…) or a value
        job.append(f"{k}={next((v for v in vals if v != str(default)), vals[0])}")
    cfg = compose_preset(name, [*job, *tiny, "train.max_steps=2"])
    threads = torch.get_num_threads()
    try:
        summary = Run(cfg, tmp_path, num_threads=1).execute()  # 1 thread: fast on a busy machine too
    finally:
        torch.set_num_threads(threads)
    assert summary["status"] == "completed", summary
    assert summary["steps"] == 2
    assert (tmp_path / "metrics.jsonl").is_file()
