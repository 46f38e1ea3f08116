"""The Hydra configs, shipped inside the package: found as `pkg://normlab.configs` by `normlab-train`
and train.py; `configs/` at the root of a checkout is a link to this directory.

Only presets live here as YAML (configs/experiment/, the SLURM launcher, the help template) with
config.yaml's defaults list; every group's options and their defaults are dataclasses (normlab.config),
put in Hydra's ConfigStore by `normlab.config.register()`."""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
