"""`python train.py --help`: the config groups, every knob with the comment above it in configs/, current
values after overrides, and the presets — generated from the YAML files, so a new knob shows up by itself."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from normlab.config_help import parse_yaml_comments

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def run_help(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [sys.executable, str(cwd / "train.py"), *args, "--help"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def comments_above_keys(path: Path) -> dict[str, str]:
    """Top-level `key: value` lines of a group file with the comment line(s) right above them, read with
    a plain regex (an independent reading of the convention the help relies on)."""
    out, block = {}, []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            block.append(line.lstrip("#").strip())
        elif m := re.match(r"^([a-z][a-z_]*):\s*\S", line):
            if block and m.group(1) != "name":
                out[m.group(1)] = block[-1]
            block = []
        else:
            block = []
    return out


@pytest.fixture(scope="module")
def help_text() -> str:
    return run_help("model=tiny", "norm=rms")


def test_help_lists_groups_and_presets(help_text):
    assert "== Config groups (GROUP=OPTION) ==" in help_text
    assert "norm: bn, deepnorm, dyt, ln, none, rms, scalenorm" in help_text
    assert "placement: double, lnscale, mixln, post, pre, reordered, resi_dual" in help_text
    presets = help_text.split("== Presets")[1].split("== Flags")[0]
    for path in sorted((CONFIGS / "experiment" / "findings").glob("[!_]*.yaml")):  # _*.yaml: shared bases
        assert re.search(rf"^  findings/{path.stem}\s+Finding \d", presets, re.M), path.stem
    assert re.search(r"^  example\s+Example of a sweep preset of your own", presets, re.M)
    assert "_cpu_small" not in help_text
    assert "python train.py --cfg job --resolve" in help_text


@pytest.mark.parametrize(
    "group", ["train/default", "optim/adamw", "norm/rms", "model/tiny", "spikes/default"]
)
def test_every_commented_knob_appears_with_its_comment_and_current_value(help_text, group):
    knobs = squash(help_text.split("== Knobs")[1].split("== Presets")[0])
    package = group.split("/")[0]
    for key, comment in comments_above_keys(CONFIGS / f"{group}.yaml").items():
        # the comment (its last line here) belongs to this knob: no other knob's "group.key=" in between
        between = rf"(?:(?!{package}\.\w+=).)*"
        assert re.search(rf"{package}\.{key}=\S+ {between}{re.escape(squash(comment))}", knobs), (
            key,
            comment,
        )
    # values are the composed ones, overrides applied: model=tiny and norm=rms above
    assert "model.d_model=64 " in knobs and "norm.eps=1e-06 " in knobs
    assert "model.n_layers=${depth} " in knobs  # interpolations shown as written (--resolve resolves them)


def test_a_new_knob_shows_up_without_touching_the_help(tmp_path):
    shutil.copytree(CONFIGS, tmp_path / "configs")
    shutil.copy(ROOT / "train.py", tmp_path / "train.py")
    train_yaml = tmp_path / "configs" / "train" / "default.yaml"
    train_yaml.write_text(
        train_yaml.read_text() + "# a knob added for this test, documented here only\nnew_knob: 7\n"
    )
    # the configs ship in the package; --config-path points Hydra at the edited copy instead
    text = squash(run_help("--config-path", str(tmp_path / "configs"), cwd=tmp_path))
    assert "train.new_knob=7 a knob added for this test, documented here only" in text


def test_comment_conventions():
    doc = parse_yaml_comments(
        "# @package _global_\n"
        "# A header that runs over\n# two lines.\n# null = off\nlimit: 1.5  # trailing note\n"
        "# consecutive steps\npatience: 50\nnested:\n  # inner knob\n  inner: [1, 2]\n"
        "defaults:\n  # not a knob\n  - model: tiny\n_target_: x\n"
    )
    assert doc.package == "_global_"
    assert doc.header == "A header that runs over two lines."
    assert [(k.path, k.comment) for k in doc.knobs] == [
        ("limit", "null = off trailing note"),
        ("patience", "consecutive steps"),
        ("nested.inner", "inner knob"),
    ]
    assert (
        parse_yaml_comments("# LayerNorm: y = x\nname: ln\n# added\neps: 1.0e-5\n").header
        == "LayerNorm: y = x"
    )
