"""The run config a command line would build, composed in-process (tests, benchmarks, profilers, scripts)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from normlab.config.store import register
from normlab.configs import CONFIG_DIR


def compose_config(
    overrides: Sequence[str] = (), *, config_dir: Path | None = None, hydra: bool = False
) -> DictConfig:
    """configs/config.yaml with Hydra `overrides`, as `python train.py OVERRIDES` composes it; `hydra=True`
    keeps the `hydra` node (for code that reads hydra.sweeper or hydra.launcher)."""
    register()  # the groups' options live in Hydra's ConfigStore
    with initialize_config_dir(str(config_dir or CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)
