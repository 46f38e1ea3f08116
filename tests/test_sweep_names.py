"""Run names carry every swept value that differs between a sweep's jobs (normlab.sweeps.names): the
documented stacked sweep over seeds and learning rates gives eight names, not four twice."""

from __future__ import annotations

import itertools

from hydra.core.override_parser.overrides_parser import OverridesParser

from normlab.config.compose import compose_config
from normlab.sweeps.names import distinct_names


def jobs(**swept: list[str]) -> list[list[str]]:
    """The jobs' overrides as Hydra's basic sweeper expands `key=a,b` (one value per key per job)."""
    keys = list(swept)
    return [
        [f"{k}={v}" for k, v in zip(keys, values, strict=True)]
        for values in itertools.product(*swept.values())
    ]


def resolved_names(overrides: list[list[str]], extra: list[str] | None = None) -> list[str]:
    config = compose_config(extra or [])
    named = distinct_names(config, overrides)
    return [
        str(compose_config([*(extra or []), *ov, *([n] if n else [])]).name)
        for ov, n in zip(overrides, named, strict=True)
    ]


def test_a_learning_rate_sweep_names_the_learning_rate():
    overrides = jobs(seed=["0", "1", "2", "3"], **{"optim.lr": ["0.001", "0.003"]})
    names = resolved_names(overrides)
    assert len(set(names)) == 8  # before: ln-pre-L6-w100-s1 twice, for each seed
    assert names[0] == "ln-pre-L6-w100-s0-lr0.001" and names[1] == "ln-pre-L6-w100-s0-lr0.003"
    # the override parses as one value, not a sweep
    (named, *_) = distinct_names(compose_config([]), overrides)
    assert named is not None and not OverridesParser.create().parse_override(named).is_sweep_override()


def test_what_the_template_shows_adds_nothing():
    assert distinct_names(compose_config([]), jobs(norm=["ln", "rms"], seed=["0", "1"])) == [None] * 4
    assert distinct_names(compose_config([]), jobs(depth=["2", "4"], warmup_steps=["0", "100"])) == [None] * 4
    # one job, or a sweep that sets the name itself: left alone
    assert distinct_names(compose_config([]), [["optim.lr=0.1"]]) == [None]
    mine = [["optim.lr=0.1", "name=a"], ["optim.lr=0.2", "name=b"]]
    assert distinct_names(compose_config([]), mine) == [None, None]


def test_a_recipe_and_a_group_option_are_named_by_their_option():
    # dyt_llama's norm.name is dyt: the template's ${norm.name} would show both as dyt
    names = resolved_names(jobs(norm=["dyt", "dyt_llama"]))
    assert names == ["dyt-pre-L6-w100-s0-dyt", "dyt-pre-L6-w100-s0-dyt_llama"]
    names = resolved_names(jobs(model=["tiny", "small"], **{"train.batch_size": ["8", "16"]}))
    assert names == [
        "ln-pre-L6-w100-s0-tiny-batch_size8",
        "ln-pre-L6-w100-s0-tiny-batch_size16",
        "ln-pre-L6-w100-s0-small-batch_size8",
        "ln-pre-L6-w100-s0-small-batch_size16",
    ]


def test_a_word_value_is_set_apart_from_its_key():
    names = resolved_names(jobs(**{"model.qk_norm": ["none", "ln"], "optim.lr": ["0.1", "1.0"]}))
    assert names[:2] == ["ln-pre-L6-w100-s0-qk_norm_none-lr0.1", "ln-pre-L6-w100-s0-qk_norm_none-lr1.0"]
