"""Every finding's preset (configs/experiment/findings/NAME.yaml) composes with `+experiment=findings/NAME`,
launches with joblib, has at least 3 seeds per cell, fits the core set's time budget, and trains 2 steps.
The rest of configs/experiment/ is the users' (lightning-hydra-template's convention): any preset there
composes, and the example trains."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from normlab.config.compose import compose_config
from normlab.study.findings import CORE, FINDINGS, PRESET_GROUP
from normlab.train.run import Run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
FOLDER = CONFIGS / "experiment" / PRESET_GROUP
PRESETS = sorted(p.stem for p in FOLDER.glob("*.yaml") if not p.stem.startswith("_"))
USER_PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))  # the users' own
BASE = "_cpu_small"  # shared settings, not a finding


# Keys a preset may set before the part of normlab that reads them exists (other work in progress).
def compose_preset(name: str, overrides=(), hydra: bool = False):
    return compose_config([f"+experiment={name}", *overrides], hydra=hydra)


@cache
def preset(name: str):
    """A finding's preset as Hydra composes it, hydra node included (composed once per session)."""
    return compose_preset(FINDINGS[name].preset, hydra=True)


def sweep_params(cfg) -> dict[str, list[str]]:
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    return {k: str(v).split(",") for k, v in params.items()}


def test_one_preset_per_finding():
    assert sorted(FINDINGS) == PRESETS
    assert (FOLDER / f"{BASE}.yaml").is_file()
    assert all(f.preset == f"findings/{f.name}" for f in FINDINGS.values())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_composes(name):
    text = (FOLDER / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_")
    assert f"# Finding {FINDINGS[name].number} — " in text, "a finding's preset says which finding it is"
    assert f"- {PRESET_GROUP}/{BASE}" in text, "presets share the CPU settings of _cpu_small"
    cfg = preset(name)
    assert cfg.experiment_name == name
    assert cfg.logger.name == "none"
    assert cfg.data.name == "synthetic"
    assert cfg.model.d_model == 64 and cfg.data.vocab_size == 1024
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("JoblibLauncher")
    assert launcher.n_jobs == -1  # one job per core
    params = sweep_params(cfg)
    assert params, "a preset sweeps something"
    assert all(len(v) >= 2 for v in params.values())
    assert len(params.get("seed", [])) >= 3, "at least 3 seeds per cell"


def test_a_user_override_beats_the_shared_base():
    cfg = compose_preset("findings/xiong_warmup", ["model=small", "train.batch_size=8"])
    assert cfg.model.d_model == 128 and cfg.train.batch_size == 8


@pytest.mark.parametrize("name", USER_PRESETS)
def test_user_presets_compose_beside_the_findings(name):
    """configs/experiment/ holds the users' own presets next to findings/: each composes by its name."""
    cfg = compose_preset(name, hydra=True)
    assert cfg.experiment_name == name
    assert name not in FINDINGS  # a finding's name stays free for its preset's experiment_name


def test_the_example_user_preset_sweeps_and_trains(tiny, tmp_path):
    cfg = compose_preset("example", hydra=True)
    assert sweep_params(cfg) == {"norm": ["ln", "rms"], "placement": ["pre", "post"], "seed": ["0", "1", "2"]}
    assert cfg.data.name == "synthetic" and cfg.logger.name == "none"
    cfg = compose_preset("example", ["norm=rms", "placement=post", *tiny, "train.max_steps=2"])
    threads = torch.get_num_threads()
    try:
        summary = Run(cfg, tmp_path, num_threads=1).execute()
    finally:
        torch.set_num_threads(threads)
    assert summary["status"] == "completed" and summary["steps"] == 2


# Calibration (this machine, 1 thread, idle): a tiny-model step at batch 16 × 64 tokens costs about
# 11 ms per block plus 8 ms of embedding/head with the 1024-token vocabulary; a job about 1.5 s to start
# and evaluate in joblib's reused workers (84 one-step jobs of finding 1 took 62 s on the 2 cores).
STEP_S_PER_BLOCK, STEP_S_HEAD, JOB_S = 0.011, 0.008, 1.5


def preset_work_s(name: str) -> float:
    """Pure compute of a preset's sweep, in single-thread seconds, from its jobs × steps × blocks."""
    cfg = preset(name)
    params = sweep_params(cfg)
    jobs = 1
    for values in params.values():
        jobs *= len(values)
    depths = [int(d) for d in params.get("depth", [cfg.depth])]
    batches = [int(b) for b in params.get("train.batch_size", [cfg.train.batch_size])]
    steps = max(int(cfg.train.max_steps), 1)
    tokens = (sum(batches) / len(batches)) * int(cfg.train.seq_len) / (16 * 64)
    per_step = tokens * (STEP_S_HEAD + STEP_S_PER_BLOCK * sum(depths) / len(depths))
    return jobs * (steps * per_step + JOB_S)


def test_core_presets_fit_the_time_budget():
    """The core set must run in 15 minutes on 2 idle cores: bound its work in (job × step × block) units,
    leaving room for the data cache (≈ 1 min), the norm profile and the figures."""
    work_s = sum(preset_work_s(name) for name in CORE)
    assert work_s / 2 < 12 * 60, f"core set ≈ {work_s / 2 / 60:.1f} min of pure compute on 2 cores"


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
        choice = next((v for v in vals if v != str(default)), vals[0])
        if k == "placement" and OmegaConf.select(cfg, "hydra.sweeper.params.norm"):
            choice = "post"  # deepnorm is defined for post only
        job.append(f"{k}={choice}")
    cfg = compose_preset(FINDINGS[name].preset, [*job, *tiny, "train.max_steps=2"])
    threads = torch.get_num_threads()
    try:
        summary = Run(cfg, tmp_path, num_threads=1).execute()  # 1 thread: fast on a busy machine too
    finally:
        torch.set_num_threads(threads)
    assert summary["status"] == "completed", summary
    assert summary["steps"] == 2
    assert (tmp_path / "metrics.jsonl").is_file()


@pytest.mark.parametrize("name", PRESETS)
def test_calibration_seeds_are_not_evaluated(name):
    """Issue 28: a choice made on seed 0 (a head, a learning rate) must not be judged on seed 0 again; the
    calibration's seeds and the preset's seeds are disjoint, and its perturbation's overrides keep them."""
    finding = FINDINGS[name]
    cfg = preset(name)
    seeds = {int(s) for s in sweep_params(cfg)["seed"]}
    if finding.calibration is not None:
        assert not seeds & set(finding.calibration.seeds), (seeds, finding.calibration.seeds)
        assert finding.calibration.arms and finding.calibration.chosen
    assert finding.perturbation is not None
    assert not any(o.startswith("seed=") for o in finding.perturbation.overrides)
