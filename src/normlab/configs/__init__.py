"""The Hydra configs, shipped inside the package: found as `pkg://normlab.configs` by `normlab-train`
and train.py; `configs/` at the root of a checkout is a link to this directory."""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
