"""The config system: every group's options and their dataclasses (groups.py), their nodes in Hydra's
ConfigStore (store.py), the check applied when a job starts (check.py), `--help` (help.py) and composing a
config in-process (compose.py). The knobs themselves are declared with `normlab.knobs.knob`."""

from normlab.config.check import checked
from normlab.config.groups import GROUPS
from normlab.config.store import register

__all__ = ["GROUPS", "checked", "register"]
