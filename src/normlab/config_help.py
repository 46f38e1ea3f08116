"""`python train.py --help`: the config groups, every knob with the comment that documents it in configs/,
and the presets — generated from the YAML files themselves, so the help never drifts from them.

Hydra renders its help from the template in configs/hydra/help/normlab.yaml; that template calls the
`normlab_help` resolver registered here (train.py registers it before Hydra starts). The resolver reads
the config directory Hydra composed from (`hydra.runtime.config_sources`), the chosen option of every
group (`hydra.runtime.choices`, so `python train.py model=tiny --help` shows the tiny model's values) and
the composed config for the current values, with overrides applied.

Comment conventions it reads (the ones configs/ follows): a file's first comment lines, up to the first
key, describe the option; comment lines right above a key (or after it on the same line) document it.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

RESOLVER = "normlab_help"
PRESET_GROUP = "experiment"
NAME_WIDTH = 34  # column of the comments in the knob list
WIDTH = 110

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.-]*)\s*:(?P<rest>.*)$")


@dataclass
class Knob:
    path: str  # dotted key inside the file's package, e.g. "eps" or "launcher.n_jobs"
    comment: str


@dataclass
class YamlDoc:
    """What a config file says about itself: its header comment and each key's comment."""

    header: str = ""
    knobs: list[Knob] = field(default_factory=list)
    package: str | None = None  # from a `# @package` line


def _strip_inline_comment(rest: str) -> str:
    """The comment after a value on the same line (`key: 3  # why`), ignoring '#' inside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "\"'":
            quote = None if quote == ch else (quote or ch)
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[i + 1 :].strip()
    return ""


IDENTITY_KEYS = ("name", "_target_", "defaults")  # a file's first key that is not a documented knob


def _split_header(pending: list[str], first_key: str) -> tuple[str, list[str]]:
    """Split the comment lines above a file's first key into the file's header and that key's comment.

    Above an identity key (`name`, `_target_`, `defaults`) every line is header. Otherwise the header is
    the lines up to the last one that ends a sentence, and the lines after it document the key:
    "# A run is diverged ... consecutive steps. / # null = only the non-finite rule / max_loss_ratio: 1.5".
    """
    if first_key in IDENTITY_KEYS:
        return " ".join(pending), []
    ends = [i for i, line in enumerate(pending[:-1]) if line.endswith(".")]
    if not ends:
        return "", pending
    k = ends[-1] + 1
    return " ".join(pending[:k]), pending[k:]


def parse_yaml_comments(text: str) -> YamlDoc:
    """Comments of a Hydra config file by key. Keys of the defaults list and `_target_`-style keys
    (leading underscore) are skipped; nested keys get dotted paths."""
    doc = YamlDoc()
    pending: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    seen_key = False
    in_defaults = False
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if body.startswith("@package"):
                parts = body.split(None, 1)
                doc.package = parts[1].strip() if len(parts) > 1 else None
            else:
                pending.append(body)
            continue
        if not stripped:
            if not seen_key and pending and not doc.header:
                doc.header, pending = " ".join(pending), []  # a header separated by a blank line
            continue
        if stripped.startswith("- "):  # a list item (the defaults list): its comments are not a knob's
            pending = []
            continue
        match = _KEY.match(line)
        if not match:
            pending = []
            continue
        indent, key = len(match["indent"]), match["key"]
        if not seen_key and not doc.header:
            doc.header, pending = _split_header(pending, key)
        seen_key = True
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        value = match["rest"].strip()
        if indent == 0:
            in_defaults = key == "defaults"
        if value == "" or value.startswith("#"):  # a mapping: its keys follow, indented
            stack.append((indent, key))
        elif not (in_defaults or key.startswith("_") or any(k.startswith("_") for _, k in stack)):
            comment = " ".join([*pending, _strip_inline_comment(match["rest"])]).strip()
            doc.knobs.append(Knob(path, comment))
        pending = []
    if not seen_key and pending and not doc.header:
        doc.header = " ".join(pending)
    return doc


# ------------------------------------------------------------------------------------------- rendering


def _config_dir(root: DictConfig) -> Path | None:
    """The file-system directory of the primary config (the `main` config source)."""
    for source in root.hydra.runtime.get("config_sources", []) or []:
        if source.get("provider") != "main":
            continue
        if source.get("schema") == "file":
            return Path(source["path"])
        if source.get("schema") == "pkg" and source.get("path") == "normlab.configs":
            from normlab.configs import CONFIG_DIR

            return CONFIG_DIR
    return None


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


def _knob_line(name: str, comment: str) -> str:
    if not comment:
        return f"  {name}"
    if len(name) + 2 >= NAME_WIDTH:
        first, pad = f"  {name}\n", " " * NAME_WIDTH
        return first + textwrap.fill(comment, WIDTH, initial_indent=pad, subsequent_indent=pad)
    pad = " " * NAME_WIDTH
    return textwrap.fill(comment, WIDTH, initial_indent=f"  {name}".ljust(NAME_WIDTH), subsequent_indent=pad)


def _group_options(config_dir: Path, group: str) -> list[str]:
    """A group's options, those in subfolders by their path (experiment: findings/xiong_warmup); files
    starting with "_" are shared bases (configs/experiment/findings/_cpu_small.yaml), not options."""
    folder = config_dir / group
    paths = [p.relative_to(folder).with_suffix("") for p in folder.rglob("*.yaml")]
    return sorted(p.as_posix() for p in paths if not p.name.startswith("_"))


def _primary_groups(config_dir: Path, choices: Mapping[str, Any]) -> list[str]:
    """Config groups in the order of config.yaml's defaults list (then any other chosen group)."""
    order = []
    config = config_dir / "config.yaml"
    if config.is_file():
        for line in config.read_text().splitlines():
            m = re.match(r"^\s*-\s+(?:override\s+)?([\w/]+)\s*:", line)
            if m:
                order.append(m.group(1))
    order += [g for g in choices if g not in order]
    return [g for g in order if not g.startswith("hydra") and g != PRESET_GROUP and (config_dir / g).is_dir()]


def render_knobs(root: DictConfig) -> str:
    """Every knob of the composed config's groups and top level, value and comment, grouped by file."""
    config_dir = _config_dir(root)
    if config_dir is None:
        return "  (the config directory is not on disk: see configs/ in the repository)"
    choices = root.hydra.runtime.choices
    blocks = []
    top = parse_yaml_comments((config_dir / "config.yaml").read_text())
    lines = ["top level (configs/config.yaml)"]
    for knob in top.knobs:
        if knob.path.split(".")[0] in ("hydra", "defaults"):
            continue
        lines.append(_knob_line(f"{knob.path}={_raw_value(root, knob.path)}", knob.comment))
    blocks.append("\n".join(lines))
    for group in _primary_groups(config_dir, choices):
        choice = choices.get(group)
        options = ", ".join(_group_options(config_dir, group))
        path = config_dir / group / f"{choice}.yaml"
        if choice is None or not path.is_file():
            blocks.append(f"{group}: not chosen (options: {options})")
            continue
        doc = parse_yaml_comments(path.read_text())
        doc.knobs = _base_knobs(path, doc.knobs) + doc.knobs
        head = f"{group}={choice}  (configs/{group}/{choice}.yaml; options: {options})"
        lines = [head]
        if doc.header:
            lines.append(textwrap.fill(doc.header, WIDTH, initial_indent="  ", subsequent_indent="  "))
        package = doc.package if doc.package and doc.package != "_group_" else group
        for knob in doc.knobs:
            if knob.path == "name":  # the option's own name: chosen with GROUP=OPTION, not set directly
                continue
            dotted = knob.path if package == "_global_" else f"{package}.{knob.path}"
            lines.append(_knob_line(f"{dotted}={_raw_value(root, dotted)}", knob.comment))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _base_knobs(path: Path, own: list) -> list:
    """Knobs of the shared bases a group file lists in its defaults (`- _base`), minus those it sets itself:
    model/small.yaml sets d_model and inherits the other keys, with their comments, from model/_base.yaml."""
    mine = {k.path for k in own}
    found = []
    for base in re.findall(r"^\s*-\s+(_\w+)\s*$", path.read_text(), flags=re.MULTILINE):
        base_path = path.with_name(f"{base}.yaml")
        if base_path.is_file():
            found += [k for k in parse_yaml_comments(base_path.read_text()).knobs if k.path not in mine]
    return found


def _first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not the one of "et al.", "Fig.", "e.g.")."""
    if not text:
        return ""
    parts = re.split(r"(?<!\bal)(?<!\bFig)(?<!\be\.g)(?<!\bi\.e)\.\s+(?=[A-Za-z0-9])", text, maxsplit=1)
    return parts[0].rstrip(".") + "."


def render_presets(root: DictConfig) -> str:
    """Each preset of configs/experiment/ (its subfolders too) with the first line of its header comment."""
    config_dir = _config_dir(root)
    folder = config_dir / PRESET_GROUP if config_dir else None
    if folder is None or not folder.is_dir():
        return "  (none)"
    lines = []
    for name in _group_options(config_dir, PRESET_GROUP):  # the findings' presets: findings/NAME
        header = parse_yaml_comments((folder / f"{name}.yaml").read_text()).header
        lines.append(_knob_line(name, _first_sentence(header)))
    return "\n".join(lines) or "  (none)"


def render_groups(root: DictConfig) -> str:
    """Each config group with its options, shared bases (files starting with "_") left out."""
    config_dir = _config_dir(root)
    if config_dir is None:
        return "  (the config directory is not on disk: see configs/ in the repository)"
    groups = sorted(p.name for p in config_dir.iterdir() if p.is_dir() and p.name != "hydra")
    return "\n".join(f"{g}: {', '.join(_group_options(config_dir, g))}" for g in groups)


def _escape(text: str) -> str:
    # Hydra fills the template with string.Template: a literal '$' must be doubled
    return text.replace("$", "$$")


def _resolve(what: str, *, _root_: DictConfig) -> str:
    if what == "knobs":
        return _escape(render_knobs(_root_))
    if what == "presets":
        return _escape(render_presets(_root_))
    if what == "groups":
        return _escape(render_groups(_root_))
    raise ValueError(f"normlab_help: unknown section {what!r}; use groups, knobs or presets")


def register_help_resolver() -> None:
    """Make `${normlab_help:groups}`, `${normlab_help:knobs}` and `${normlab_help:presets}` available to the help template."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve, use_cache=False)
