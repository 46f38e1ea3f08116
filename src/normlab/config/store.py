"""Put every config group's options in Hydra's ConfigStore, where configs/config.yaml's defaults list finds
them: `norm=rms` selects the node `norm/rms`, whose values are RMSNormConfig's defaults.

The nodes hold plain values, not the typed dataclasses: Hydra would then refuse a value of the wrong type
while composing, before the run directory exists, where normlab records it as `status: invalid` with its
sentence (docs/errors.md). The types and rules apply when the job starts (`normlab.config.checked`).
"""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from normlab.config.groups import GROUPS, RootConfig

TOP_LEVEL = "normlab_top_level"  # the top-level knobs, listed in configs/config.yaml's defaults


def register() -> None:
    """Store `GROUP/OPTION` for every option of GROUPS, and the top-level knobs as `normlab_top_level`.
    Idempotent; call it before Hydra composes (normlab.cli.main and compose_config do)."""
    cs = ConfigStore.instance()
    cs.store(name=TOP_LEVEL, node=RootConfig.defaults(), provider="normlab")
    for group, options in GROUPS.items():
        for name, option in options.items():
            cs.store(group=group, name=name, node=option.values(), provider="normlab")
