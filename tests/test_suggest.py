"""Command-line mistakes answered with the fix (normlab.suggest); the sentences themselves are rows of
docs/errors.md's table (tests/lifecycle/test_errors_table.py runs each through train.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from normlab.configs import CONFIG_DIR
from normlab.study.findings import FINDINGS
from normlab.study.pilot.sweeps import PILOT_FINDINGS
from normlab.suggest import CommandLineError, before_hydra, presets, sentence, unknown_key


def test_experiment_is_taken_as_lightning_hydra_template_users_type_it():
    assert before_hydra(["-m", "experiment=example", "seed=0,1"]) == ["-m", "+experiment=example", "seed=0,1"]
    assert before_hydra(["+experiment=example"]) == ["+experiment=example"]
    assert before_hydra(["experiment_name=x"]) == ["experiment_name=x"]


def test_experiment_without_plus_composes_the_preset(repo_root):
    out = subprocess.run(
        [sys.executable, "train.py", "experiment=findings/xiong_warmup", "--cfg", "job"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "experiment_name: xiong_warmup" in out.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["hydra/launcher=joblib", "norm=ln"],
        ["hydra/launcher=submitit_local"],
        ["train.resume=auto", "norm=ln"],
    ],
)
def test_a_command_line_that_would_do_something_else_is_refused(argv):
    with pytest.raises(CommandLineError):
        before_hydra(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "hydra/launcher=joblib", "norm=ln,rms"],
        ["train.resume=auto", "hydra.run.dir=outputs/runs/x"],
        ["-m", "train.resume=auto", "norm=ln,rms"],  # a sweep's continue command
        ["hydra/launcher=joblib", "--cfg", "job"],  # only shows the config
    ],
)
def test_the_same_settings_where_they_mean_what_they_say(argv):
    assert before_hydra(argv) == argv


def test_every_preset_is_listed_shared_parts_left_out():
    found = presets(CONFIG_DIR)
    assert (
        found[0] == "example"
        and "findings/xiong_warmup" in found
        and "findings/tied_embedding_collapse" in found
    )
    assert not any(p.rsplit("/", 1)[-1].startswith("_") for p in found)
    paper = {p for p in found if p.startswith("findings/paper/")}
    pilot = {p for p in found if p.startswith("findings/pilot/")}
    cpu = {p for p in found if p.startswith("findings/")} - paper - pilot
    assert cpu == {f.preset for f in FINDINGS.values()}  # each finding's CPU preset and its paper-scale one
    assert paper == {f.paper_preset for f in FINDINGS.values()}
    # the GPU pilot's: the depth findings' presets and the sweep findings 12 and 13 share (issue 38)
    assert pilot == {f"findings/pilot/{name}" for name in (*PILOT_FINDINGS, "depth")}


def test_unknown_keys_match_groups_and_top_level_knobs_first():
    assert unknown_key("placment", "pre") == "placment is not a setting; did you mean placement=pre?"
    assert unknown_key("dpeth", "12") == "dpeth is not a setting; did you mean depth=12?"
    assert (
        unknown_key("experiments", "example")
        == "experiments is not a setting; did you mean +experiment=example?"
    )
    assert unknown_key("optim.l", "0.1") == "optim.l is not a setting; did you mean optim.lr=0.1?"
    assert unknown_key("zzzzzz", "1").endswith("python train.py --help lists every setting.")


def test_hydra_texts_are_answered():
    text = "Could not override 'placment'.\nTo append to your config use +placment=pre"
    assert sentence(text) == "placment is not a setting; did you mean placement=pre?"
    ambiguous = (
        "Ambiguous value for argument 'optim.betas=0.9,0.95'\n1. To use it as a list, use key=[value1,value2]"
    )
    assert "write optim.betas=[0.9,0.95]" in sentence(ambiguous)
    assert sentence("something else") is None


def test_a_sweep_preset_without_multirun_is_refused_naming_m():
    """+experiment=example sweeps norm × placement × seed (12 runs): without -m Hydra would train one of
    them and exit 0. Refused, as a launcher without -m is (the sentence is a row of docs/errors.md, run
    through train.py by tests/lifecycle/test_errors_table.py); with every swept key given one value on the
    command line it is one run on purpose, and runs."""
    from normlab.config.compose import compose_config
    from normlab.suggest import sweep_without_multirun

    cfg = compose_config(["+experiment=example"], hydra=True)
    refusal = sweep_without_multirun(cfg)
    assert refusal is not None
    assert refusal.startswith(
        "+experiment=example is a sweep preset (it sweeps norm, placement and seed: 12 runs)"
    )
    assert "add -m (python train.py -m +experiment=example) to run the sweep." in refusal
    assert sweep_without_multirun(compose_config(["+experiment=example", "seed=0"], hydra=True)).count(
        ": 4 runs"
    )
    fixed = compose_config(["+experiment=example", "norm=ln", "placement=pre", "seed=0"], hydra=True)
    assert sweep_without_multirun(fixed) is None
    assert sweep_without_multirun(compose_config([], hydra=True)) is None  # nothing swept
