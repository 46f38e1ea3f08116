"""`python train.py --help`: the config groups, every knob with its current value and the text its dataclass
field declares, and the presets — generated from the definitions themselves, so the help never drifts.

Hydra renders its help from the template in configs/hydra/help/normlab.yaml; that template calls the
`normlab_help` resolver registered here (normlab.cli.main registers it before Hydra starts). The resolver
reads the chosen option of every group (`hydra.runtime.choices`, so `python train.py model=tiny --help`
shows the tiny model's values) and the composed config for the current values, overrides applied.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from normlab.config.groups import GROUPS, RootConfig, config_class
from normlab.errors import InvalidConfig

RESOLVER = "normlab_help"
PRESET_GROUP = "experiment"
NAME_WIDTH = 34  # column of the help text in the knob list
WIDTH = 110


def _config_dir(root: DictConfig) -> Path | None:
    """The file-system directory of the primary config (the `main` config source), where presets live."""
    for source in root.hydra.runtime.get("config_sources", []) or []:
        if source.get("provider") != "main":
            continue
        if source.get("schema") == "file":
            return Path(source["path"])
        if source.get("schema") == "pkg" and source.get("path") == "normlab.configs":
            from normlab.configs import CONFIG_DIR

            return CONFIG_DIR
    return None


def _yaml_options(config_dir: Path | None, group: str) -> list[str]:
    """Options a group has as YAML files (a user's own presets; every experiment), those in subfolders by
    their path (findings/xiong_warmup); files starting with "_" are shared bases
    (configs/experiment/findings/_cpu_small.yaml), not options."""
    folder = config_dir / group if config_dir is not None else None
    if folder is None or not folder.is_dir():
        return []
    paths = [p.relative_to(folder).with_suffix("") for p in folder.rglob("*.yaml")]
    return [p.as_posix() for p in paths if not p.name.startswith("_")]


def _options(config_dir: Path | None, group: str) -> list[str]:
    return sorted(set(GROUPS.get(group, {})) | set(_yaml_options(config_dir, group)))


def _raw_value(root: DictConfig, dotted: str) -> str:
    """The composed value, interpolations shown as written (`${depth}`): nothing is resolved here."""
    node: Any = root
    for part in dotted.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return "?"
        node = node._get_node(part)
    if isinstance(node, DictConfig | ListConfig) and not node._is_interpolation():
        return str(OmegaConf.to_container(node, resolve=False))
    value = node._value()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value)
    return f'"{text}"' if text == "" or text != text.strip() else text


def _knob_line(name: str, text: str) -> str:
    if not text:
        return f"  {name}"
    pad = " " * NAME_WIDTH
    if len(name) + 2 >= NAME_WIDTH:
        return f"  {name}\n" + textwrap.fill(text, WIDTH, initial_indent=pad, subsequent_indent=pad)
    return textwrap.fill(text, WIDTH, initial_indent=f"  {name}".ljust(NAME_WIDTH), subsequent_indent=pad)


def _knob_lines(root: DictConfig, cls: type, prefix: str) -> list[str]:
    """One line per field of `cls`; a group's `name` (chosen with GROUP=OPTION) and `_target_`-style keys
    are left out."""
    return [
        _knob_line(f"{prefix}{f.name}={_raw_value(root, prefix + f.name)}", f.metadata.get("doc", ""))
        for f in dataclasses.fields(cls)
        if not (prefix and f.name == "name") and not f.name.startswith("_")
    ]


def where(cls: type) -> str:
    """Where a config class is defined, as a reader looks it up: `normlab.model.norms.RMSNormConfig`."""
    return f"{cls.__module__}.{cls.__qualname__}"


def render_knobs(root: DictConfig) -> str:
    """Every knob of the top level and of each group's chosen option: current value and help text."""
    config_dir = _config_dir(root)
    choices = root.hydra.runtime.choices
    blocks = ["\n".join([f"top level ({where(RootConfig)})", *_knob_lines(root, RootConfig, "")])]
    for group, options in GROUPS.items():
        choice = choices.get(group)
        listed = ", ".join(_options(config_dir, group))
        values = root.get(group)
        if choice is None or not isinstance(values, DictConfig):
            blocks.append(f"{group}: not chosen (options: {listed})")
            continue
        try:
            cls = config_class(group, values)
        except InvalidConfig:  # a name no option has: the run reports it
            blocks.append(f"{group}={choice}  (options: {listed}): {group}.name is not one of them")
            continue
        lines = [f"{group}={choice}  ({where(cls)}; options: {listed})"]
        about = options[choice].about if choice in options else f"configs/{group}/{choice}.yaml"
        lines.append(textwrap.fill(about, WIDTH, initial_indent="  ", subsequent_indent="  "))
        lines += _knob_lines(root, cls, f"{group}.")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def preset_about(path: Path) -> str:
    """A preset's description: the first sentence of the comment lines that open its file (not the
    `# @package` line), as configs/experiment/ writes them."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            lines.append(text)
    header = " ".join(lines)
    if not header:
        return ""
    # up to the first full stop that ends a sentence (not the one of "et al.", "Fig.", "e.g.", "i.e.")
    first = re.split(
        r"(?<!\bal)(?<!\bFig)(?<!\bFigs)(?<!\be\.g)(?<!\bi\.e)\.\s+(?=[A-Za-z0-9])", header, maxsplit=1
    )[0]
    return first.rstrip(".") + "."


def render_presets(root: DictConfig) -> str:
    """Each preset of configs/experiment/ with the first sentence of its opening comment."""
    config_dir = _config_dir(root)
    names = sorted(_yaml_options(config_dir, PRESET_GROUP))
    if config_dir is None or not names:
        return "  (none)"
    return "\n".join(_knob_line(n, preset_about(config_dir / PRESET_GROUP / f"{n}.yaml")) for n in names)


def render_groups(root: DictConfig) -> str:
    """Each config group with its options."""
    config_dir = _config_dir(root)
    groups = sorted([*GROUPS, PRESET_GROUP])
    return "\n".join(f"{g}: {', '.join(_options(config_dir, g))}" for g in groups)


# what each launcher a sweep (-m) can name does here (normlab.sweeps runs them all; docs/scaling.md)
LAUNCHERS = {
    "basic": "one job after another in the sweep's own process (the default)",
    "joblib": "n_jobs jobs at a time (hydra.launcher.n_jobs; -1 = every core), each in a fresh process with one "
    "torch thread: the way to use every core of a laptop",
    "stacked": "the jobs that share a compute graph (seeds, learning rates, ...) trained together as one "
    "stacked model, each still a run of its own (docs/scaling.md, When to stack)",
    "submitit_local": "every job at once as a local submitit process",
    "slurm": "each job a SLURM job through submitit, requeued and resumed on preemption "
    "(hydra.launcher.partition=...; docs/scaling.md)",
}


def render_launchers(root: DictConfig) -> str:
    """Each launcher a sweep can name, installed or normlab's own, with what it does; the chosen one marked."""
    from hydra.core.config_store import ConfigStore

    installed = {Path(n).stem for n in ConfigStore.instance().list("hydra/launcher")}
    config_dir = _config_dir(root)
    ours = set(_yaml_options(config_dir, "hydra/launcher"))
    chosen = root.hydra.runtime.choices.get("hydra/launcher")
    names = [n for n in LAUNCHERS if n in installed | ours]
    names += sorted(
        (installed | ours) - set(LAUNCHERS) - {"submitit_slurm"}
    )  # slurm is normlab's preset of it
    return "\n".join(
        _knob_line(f"{n}{' (chosen)' if n == chosen else ''}", LAUNCHERS.get(n, "")) for n in names
    )


def _escape(text: str) -> str:
    # Hydra fills the template with string.Template: a literal '$' must be doubled
    return text.replace("$", "$$")


SECTIONS = {
    "knobs": render_knobs,
    "presets": render_presets,
    "groups": render_groups,
    "launchers": render_launchers,
}


def _resolve(what: str, *, _root_: DictConfig) -> str:
    if what not in SECTIONS:
        raise ValueError(f"normlab_help: unknown section {what!r}; use {', '.join(SECTIONS)}")
    return _escape(SECTIONS[what](_root_))


def register_help_resolver() -> None:
    """Make `${normlab_help:groups}`, `${normlab_help:knobs}`, `${normlab_help:presets}` and
    `${normlab_help:launchers}` available to the help template."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve, use_cache=False)
