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


def test_core_presets_fit_the_time_budget():
    """The core set, with the perturbed sweeps of its robustness line, must run in 30 minutes on 2 idle
    cores (issue 28): bound its work with the cost model scripts/reproduce.py prints first, leaving room
    for the data cache (≈ 1 min), the norm measurements and the figures."""
    from normlab.study.cost import sweep_cost

    core_s = 0.0
    for name in CORE:
        finding = FINDINGS[name]
        core_s += (
            sweep_cost(finding.preset).core_s
            + sweep_cost(finding.preset, finding.perturbation.overrides).core_s
        )
    assert core_s / 2 < 26 * 60, f"core set ≈ {core_s / 2 / 60:.1f} min of pure compute on 2 cores"


def test_the_cost_model_counts_jobs_as_a_sweep_launches_them():
    """Overrides of a swept key replace its values; deepnorm off post is skipped; a recipe norm counts."""
    from normlab.study.cost import sweep_cost

    # 3 variants × 2 warm-ups × 5 seeds: deepnorm/pre skipped
    assert sweep_cost("findings/deepnet_model_update").jobs == 3 * 2 * 5
    assert sweep_cost("findings/deepnet_model_update", ["seed=1"]).jobs == 3 * 2
    assert sweep_cost("findings/dyt_vs_ln", ["norm=dyt_llama"]).jobs == 2 * 5  # 2 learning rates
    deeper = sweep_cost("findings/lnscale_depth", ["depth=24"]).core_s
    assert deeper > 1.8 * sweep_cost("findings/lnscale_depth").core_s


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


# ------------------------------------------------------------------------------ paper-scale profiles

PAPER = CONFIGS / "experiment" / PRESET_GROUP / "paper"
CPU_TEST_PARAMS = 150e6  # above this, the 5-step run shrinks the width (the depth and the rest kept)


def test_every_finding_has_a_paper_scale_profile():
    assert sorted(p.stem for p in PAPER.glob("*.yaml")) == sorted(FINDINGS)
    for f in FINDINGS.values():
        text = (PAPER / f"{f.name}.yaml").read_text()
        assert text.startswith("# @package _global_") and f"# Finding {f.number} at the paper's scale" in text
        assert f"/experiment@_here_: findings/{f.name}" in text, "it starts from the finding's CPU preset"
        assert "Stacking:" in text, "it says whether the stacked launcher applies"
        assert f.paper_scale and f.paper_preset == f"findings/paper/{f.name}"


@pytest.mark.parametrize("name", PRESETS)
def test_paper_profile_composes_at_the_papers_scale(name):
    cpu, paper = preset(name), compose_preset(FINDINGS[name].paper_preset, hydra=True)
    assert paper.experiment_name == name  # its sweeps are judged by the same finding
    assert paper.data.name == "tinystories" and paper.train.device == "auto"
    assert paper.hydra.launcher.n_jobs == 1  # one job at a time on the GPU
    assert int(paper.train.seq_len) == int(paper.model.context_length)
    bigger = (
        paper.model.d_model > cpu.model.d_model
        or max(int(d) for d in sweep_params(paper).get("depth", [paper.depth]))
        > max(int(d) for d in sweep_params(cpu).get("depth", [cpu.depth]))
        or paper.train.max_steps > cpu.train.max_steps
    )
    assert bigger, "the paper's profile is larger than the CPU one somewhere"
    assert sweep_params(paper)["seed"] == sweep_params(cpu)["seed"]


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_paper_profile_trains_five_steps(name, tiny, tmp_path):
    """One job of each paper-scale profile, its model as the profile has it (its width quartered where it
    would not fit a CPU test: above 150M parameters), on the embedded corpus, 5 steps of 2 × 32 tokens."""
    cfg = compose_preset(FINDINGS[name].paper_preset, hydra=True)
    job = []
    for k, vals in sweep_params(cfg).items():
        if k == "placement" and OmegaConf.select(cfg, "hydra.sweeper.params.norm"):
            job.append("placement=post")  # deepnorm is defined for post only
            continue
        node = OmegaConf.select(cfg, k)
        default = node.name if hasattr(node, "name") else node
        job.append(f"{k}={next((v for v in vals if v != str(default)), vals[0])}")
    depth = int(next((o.split("=")[1] for o in job if o.startswith("depth=")), cfg.depth))
    d = int(cfg.model.d_model)
    shrink = []
    if 12 * depth * d * d > CPU_TEST_PARAMS:
        shrink = [f"model.d_model={d // 4}"]
    steps = 0 if int(cfg.train.max_steps) == 0 else 5
    drop = (
        "train.batch_size",
        "train.max_steps",
        "warmup_steps",
        "depth",
        "train.eval_every",
        "metrics.every",
    )
    keep = [o for o in tiny if o.split("=")[0] not in drop]
    overrides = [
        *job,
        *keep,
        *shrink,
        "train.batch_size=2",
        "train.seq_len=32",
        f"train.max_steps={steps}",
        "train.eval_batches=1",
        "train.eval_every=0",
        "train.device=cpu",
    ]
    run_cfg = compose_preset(FINDINGS[name].paper_preset, overrides)
    threads = torch.get_num_threads()
    try:
        summary = Run(run_cfg, tmp_path, num_threads=1).execute()
    finally:
        torch.set_num_threads(threads)
    assert summary["status"] == "completed", summary
    assert summary["steps"] == steps
