"""`python train.py --help`: the config groups, every knob with the text its dataclass field declares and its
current value after overrides, and the presets — generated from the definitions, so a new knob shows up by
itself."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import open_dict

from normlab.config import GROUPS, checked, register
from normlab.config.compose import compose_config
from normlab.config.groups import Option, RootConfig, TrainConfig
from normlab.config.help import preset_about, render_knobs
from normlab.knobs import knob
from normlab.model import NORMS, PLACEMENTS
from normlab.model.norms import RECIPES

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def run_help(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def help_text() -> str:
    return run_help("model=tiny", "norm=rms", "placement=mixln")


def test_help_lists_groups_and_presets(help_text):
    assert "== Config groups (GROUP=OPTION) ==" in help_text
    assert f"norm: {', '.join(sorted([*NORMS, *RECIPES]))}" in help_text  # every norm and recipe, sorted
    assert f"placement: {', '.join(sorted(PLACEMENTS))}" in help_text
    assert "model: base, small, tiny" in help_text
    presets = help_text.split("== Presets")[1].split("== Launchers")[0]
    for path in sorted((CONFIGS / "experiment" / "findings").glob("[!_]*.yaml")):  # _*.yaml: shared bases
        assert re.search(rf"^  findings/{path.stem}\s+Finding \d", presets, re.M), path.stem
    assert re.search(r"^  example\s+Example of a sweep preset of your own", presets, re.M)
    assert "_cpu_small" not in help_text
    assert "python train.py --cfg job --resolve" in help_text


def test_help_lists_the_launchers_a_sweep_can_name(help_text):
    """joblib and stacked (the ones the README shows) and every launcher normlab runs, each with what it does."""
    launchers = help_text.split("== Launchers of a sweep (python train.py -m ... hydra/launcher=NAME) ==")[1]
    launchers = launchers.split("== Flags")[0]
    for name in ("basic (chosen)", "joblib", "stacked", "submitit_local", "slurm"):
        assert re.search(rf"^  {re.escape(name)}\s+\S", launchers, re.M), name
    assert "one stacked model" in squash(launchers) and "one torch thread" in squash(launchers)


def chosen_classes() -> list[tuple[str, type]]:
    from normlab.model.norms import RMSNormConfig
    from normlab.model.placements import MixLNConfig

    classes = [("", RootConfig), ("norm.", RMSNormConfig), ("placement.", MixLNConfig)]
    defaults = {"data": "tinystories", "logger": "wandb"}  # configs/config.yaml's choices
    for group in ("model", "schedule", "optim", "train", "data", "metrics", "spikes", "divergence", "logger"):
        options = GROUPS[group]
        classes += [(f"{group}.", options[defaults.get(group, next(iter(options)))].config)]
    return classes


@pytest.mark.parametrize(("prefix", "cls"), chosen_classes(), ids=lambda x: getattr(x, "__name__", x))
def test_every_knob_appears_with_its_text_and_current_value(help_text, prefix, cls):
    knobs = squash(help_text.split("== Knobs")[1].split("== Presets")[0])
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or (prefix and f.name == "name"):
            continue
        text = squash(f.metadata["doc"])
        assert text, f"{prefix}{f.name} has no help text"
        # the text belongs to this knob: no other knob's "key=" between the two
        value = r"(?:(?! [\w.]+=).)*? "
        assert re.search(rf"(?:^| ){re.escape(prefix + f.name)}={value}{re.escape(text)}", knobs), (
            prefix,
            f.name,
        )
    # values are the composed ones, overrides applied: model=tiny and norm=rms above
    assert (
        "model.d_model=64 " in knobs
        and "norm.eps=1e-06 " in knobs
        and "placement.post_fraction=0.25 " in knobs
    )
    assert "model.n_layers=${depth} " in knobs  # interpolations shown as written (--resolve resolves them)


def test_every_option_says_what_it_is():
    for group, options in GROUPS.items():
        for name, option in options.items():
            assert option.about.strip(), f"{group}={name} has nothing for --help to say"


def test_a_new_knob_is_one_field(monkeypatch):
    """A field added to TrainConfig is composed with its default, checked, and listed by --help with its text."""

    @dataclass(frozen=True)
    class WithNewKnob(TrainConfig):
        new_knob: int = knob(7, "a knob added for this test, documented here only", ge=0)

    monkeypatch.setitem(GROUPS, "train", {"default": Option(WithNewKnob, "the loop")})
    register()  # as a new process would, from the (patched) dataclasses
    try:
        cfg = compose_config(["data=synthetic", "train.new_knob=3"], hydra=True)
        assert checked({k: v for k, v in cfg.items() if k != "hydra"})["train"]["new_knob"] == 3
        with open_dict(cfg):
            cfg.hydra.runtime.choices = {"train": "default"}
        assert "train.new_knob=3 a knob added for this test, documented here only" in squash(
            render_knobs(cfg)
        )
    finally:
        monkeypatch.undo()
        register()


def test_a_presets_description_is_its_first_sentence(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "# @package _global_\n# Finding 9 — Wang et al. 2022: a claim\n# over two lines. More.\nx: 1\n"
    )
    assert preset_about(path) == "Finding 9 — Wang et al. 2022: a claim over two lines."
