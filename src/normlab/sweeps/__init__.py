"""Sweeps (`python train.py -m …`) that stop, resume and finish with nothing lost.

Every launcher a user can pick runs its jobs through normlab's code around Hydra's, under the name the user
types:

| `hydra/launcher=` | runs the jobs | module |
|---|---|---|
| `basic` (default) | one after another, in the sweep's process | `in_process.py` |
| `joblib` | `n_jobs` at a time, each in a fresh process of its own | `pool.py`, `worker.py` |
| `stacked` | the jobs that share a compute graph as one stacked model, `n_jobs` stacks at once | `stacked.py`, `pool.py` |
| `submitit_local` | all at once, as local submitit jobs | `submitit.py` |
| `slurm` | as SLURM jobs (configs/hydra/launcher/slurm.yaml) | `submitit.py` |

What they share (`base.py`): jobs matched to their directories by their overrides and `train.resume=auto`
planned for each (`jobs.py`), a signal that stops the whole sweep with every running job saved
(`stop.py`, `watchdog.py`), one line per job at the end, the command that continues the sweep and the
sweep's exit code (`ending.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)

# the launcher classes Hydra and its plugins name in `hydra.launcher._target_`, and normlab's for each
# (Hydra builds launchers only from classes in its `hydra_plugins` namespace: src/hydra_plugins/normlab_launchers)
PLUGINS = "hydra_plugins.normlab_launchers"
REPLACEMENTS = {
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher": f"{PLUGINS}.InProcessLauncher",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher": f"{PLUGINS}.LocalPoolLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher": f"{PLUGINS}.SubmititLocalLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher": f"{PLUGINS}.SubmititSlurmLauncher",
}
# the joblib launcher's settings that normlab's pool keeps (the others are loky's and have no meaning here)
POOL_KEYS = ("n_jobs",)


class NormlabLaunchers(Callback):
    """A Hydra callback (configs/config.yaml) that, when a multirun starts, puts normlab's launcher in place
    of the one the user chose by name — before Hydra builds it. A replacement by class rather than a config
    node of the same name: Hydra re-registers its plugins' nodes when it scans them, after anything we could
    store, and a YAML file of the same name is merged into the plugin's schema (deprecated since Hydra 1.1)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        ours = REPLACEMENTS.get(str(launcher.get("_target_")))
        if ours is None:  # a launcher normlab does not know: left as it is
            return
        node: dict[str, Any] = OmegaConf.to_container(launcher, resolve=False)  # type: ignore[assignment]
        if ours.endswith("LocalPoolLauncher"):
            ignored = [
                o.split("=", 1)[0]
                for o in OmegaConf.to_container(config.hydra.overrides.hydra)
                if o.startswith("hydra.launcher.")
                and o.split("=", 1)[0].removeprefix("hydra.launcher.") not in POOL_KEYS
            ]
            if ignored:
                log.warning(
                    "%s has no effect: normlab's pool takes hydra.launcher.n_jobs only", ", ".join(ignored)
                )
            node = {k: v for k, v in node.items() if k in POOL_KEYS}
        node["_target_"] = ours
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.launcher = OmegaConf.create(node)
