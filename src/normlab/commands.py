"""Commands printed for the user to copy: Hydra override values quoted where needed, and the one command
that continues a sweep."""

from __future__ import annotations

import re
import shlex

from omegaconf import DictConfig, OmegaConf

RESUME_AUTO = "train.resume=auto"


def hydra_value(text: str) -> str:
    """A path as a Hydra override value: quoted when Hydra's grammar would split or interpret it."""
    if re.fullmatch(r"[\w./~+-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def override_key(override: str) -> str:
    """`+train.x=1` → `train.x`; `hydra/launcher=joblib` → `hydra/launcher`."""
    return override.split("=", 1)[0].lstrip("+~")


def sweep_command(config: DictConfig) -> str:
    """`python train.py -m` with the sweep's own overrides, its directory fixed and train.resume=auto: run
    again, it skips the finished jobs, resumes the interrupted ones and runs the rest (normlab.sweeps)."""
    hydra = config.hydra
    task = [o for o in OmegaConf.to_container(hydra.overrides.task) if override_key(o) != "train.resume"]
    hydra_overrides = [
        o
        for o in OmegaConf.to_container(hydra.overrides.hydra)
        if override_key(o) not in ("hydra.sweep.dir", "hydra.mode")  # -m says the mode
    ]
    directory = f"hydra.sweep.dir={hydra_value(str(hydra.sweep.dir))}"
    return shlex.join(["python", "train.py", "-m", *task, *hydra_overrides, directory, RESUME_AUTO])
