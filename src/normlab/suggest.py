"""What to type instead: the command-line mistakes Hydra reports in its own words, answered with the fix.

Two moments:

- `before_hydra(argv)`, on the command line before Hydra reads it: `experiment=NAME` (lightning-hydra-
  template's habit, where `experiment` is in the defaults list) is taken as `+experiment=NAME`; a launcher
  chosen without `-m` and `train.resume=auto` without the `hydra.run.dir` it continues are refused in one
  sentence (the first would be ignored, the second would start a new run in a new directory);
- `sentence(exc)`, for the errors Hydra raises while composing: an unknown key is matched against the
  config groups and top-level knobs first (`placment=pre` → `placement=pre`), a preset that does not exist
  lists every preset (`findings/*` included), and a list value typed without brackets gets them;
- `sweep_without_multirun(config)`, on the composed config of a single run: a sweep preset
  (`+experiment=example`, whose `hydra.sweeper.params` sweep norm, placement and seed) without `-m` is
  refused, as a launcher without `-m` is — it would train one run of the sweep and exit 0.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXPERIMENT = "experiment"
MULTIRUN_FLAGS = ("-m", "--multirun")
LAUNCHER = "hydra/launcher="


class CommandLineError(Exception):
    """A command line that cannot do what it says: one sentence, exit 2, nothing written."""


def _settings(argv: Sequence[str]) -> list[str]:
    return [a for a in argv if not a.startswith("-")]


def before_hydra(argv: Sequence[str]) -> list[str]:
    """`argv` (without the program name) as Hydra should read it; raises CommandLineError for a command
    line that would silently do something else than it says."""
    out = [f"+{a}" if a.startswith(f"{EXPERIMENT}=") else a for a in argv]
    multirun = any(a in MULTIRUN_FLAGS for a in argv)
    shows = any(a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i") for a in argv)
    if shows:
        return out
    settings = _settings(argv)
    launcher = next((a for a in settings if a.startswith(LAUNCHER)), None)
    if launcher is not None and not multirun:
        raise CommandLineError(
            f"{launcher} chooses how a sweep runs its jobs, and without -m this is a single run that ignores "
            "it; add -m (python train.py -m ...) to sweep, or drop it."
        )
    if (
        "train.resume=auto" in settings
        and not multirun
        and not any(a.startswith("hydra.run.dir=") for a in settings)
    ):
        raise CommandLineError(
            "train.resume=auto continues the run in hydra.run.dir, and without hydra.run.dir this run would "
            "start afresh in a new directory; add hydra.run.dir=RUN_DIR (the directory of the run to "
            "continue), or drop train.resume=auto."
        )
    return out


def groups_and_top_level() -> list[str]:
    """What a key without a dot can be: a config group (`placement`) or a top-level knob (`depth`)."""
    from normlab.config.groups import GROUPS, RootConfig

    return [*GROUPS, *RootConfig.defaults(), EXPERIMENT]


def unknown_key(key: str, value: str | None) -> str:
    """'placment is not a setting; did you mean placement=pre?' — a key without a dot is matched against the
    groups and top-level knobs first (a group is chosen as `group=option`, never `group.name=`)."""
    from normlab.config.groups import settings

    top = groups_and_top_level()
    close = difflib.get_close_matches(key, top, n=1, cutoff=0.6) if "." not in key else []
    if not close:
        close = difflib.get_close_matches(key, settings(), n=1, cutoff=0.6)
    if not close:
        return f"{key} is not a setting; python train.py --help lists every setting."
    match = close[0]
    if match == EXPERIMENT:
        return f"{key} is not a setting; did you mean +{EXPERIMENT}={value or 'NAME'}?"
    return (
        f"{key} is not a setting; did you mean {match}={value}?"
        if value
        else f"{key} is not a setting; did you mean {match}?"
    )


def presets(config_dir: Path) -> list[str]:
    """Every preset `+experiment=NAME` takes: configs/experiment/**/*.yaml, shared parts (`_…`) left out."""
    root = config_dir / EXPERIMENT
    found = [
        p.relative_to(root).with_suffix("").as_posix()
        for p in sorted(root.rglob("*.yaml"))
        if not p.name.startswith("_")
    ]
    return sorted(found, key=lambda n: (n.count("/"), n))


def unknown_preset(name: str, config_dir: Path) -> str:
    available = presets(config_dir)
    close = difflib.get_close_matches(name, available, n=1, cutoff=0.5)
    hint = f"did you mean +{EXPERIMENT}={close[0]}? " if close else ""
    return f"+{EXPERIMENT}={name} is not a preset; {hint}the presets are {', '.join(available)}."


def sentence(text: str) -> str | None:
    """The fix for a Hydra composition error's text, or None when it is not one of those above."""
    if m := re.search(r"Could not override '([^']+)'", text):
        key = m.group(1)
        value = re.search(r"To append to your config use \+\S+?=(\S*)", text)
        return unknown_key(key, value.group(1) if value else None)
    if m := re.search(r"Ambiguous value for argument '([^=']+)=([^']*)'", text):
        key, value = m.groups()
        return (
            f"{key}={value} reads as several values; for one list value write {key}=[{value}] (in a shell: "
            f"'{key}=[{value}]'), or add -m to run one job per value."
        )
    return None


def sweep_without_multirun(config: Any) -> str | None:
    """The sentence refusing a single run (no -m) whose composed config sweeps (`hydra.sweeper.params`, as
    every preset in configs/experiment/ sets): without -m Hydra ignores them and trains one run; None when
    the config sweeps nothing, or the command line gives every swept key one value (one run of the preset,
    on purpose)."""
    from omegaconf import OmegaConf

    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    task = [str(o) for o in (OmegaConf.select(config, "hydra.overrides.task", default=None) or [])]
    fixed = {o.split("=", 1)[0].lstrip("+~") for o in task}  # one value on the command line: not swept
    swept = [str(k) for k in (params or {}) if str(k) not in fixed]
    if not swept:
        return None
    runs = 1
    for k in swept:
        runs *= len(str(params[k]).split(","))
    preset = next((o.lstrip("+") for o in task if o.lstrip("+").startswith(f"{EXPERIMENT}=")), None)
    what = f"+{preset}" if preset else "This config"
    keys = ", ".join(swept[:-1]) + (f" and {swept[-1]}" if len(swept) > 1 else swept[0])
    command = f"python train.py -m {' '.join(task)}".rstrip()
    return (
        f"{what} is a sweep preset (it sweeps {keys}: {runs} runs), and without -m this would train only one "
        f"run of it; add -m ({command}) to run the sweep."
    )
