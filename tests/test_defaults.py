"""A default is written once, in a config dataclass: what a command line composes and what code given a partial
spec (a norm built with only its name, a corpus source from an empty dict, a config dataclass built without
values) uses are the same values. Each test builds the thing bare and compares it with the thing built from
the config Hydra composes (through its ConfigStore nodes), so a second copy of a default anywhere fails."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch.nn as nn
from omegaconf import OmegaConf

from normlab.config.compose import compose_config
from normlab.data.corpus import tokenizer_spec
from normlab.data.hub import HubSource
from normlab.data.sources import SyntheticSource
from normlab.metrics.divergence import DivergenceConfig
from normlab.metrics.instruments import InstrumentConfig
from normlab.metrics.spikes import SpikeConfig
from normlab.model import GPT
from normlab.model.norms import NORMS, build_norm


def composed(*overrides: str) -> dict:
    return OmegaConf.to_container(compose_config(["data=synthetic", *overrides]), resolve=True)


@pytest.mark.parametrize(
    ("config_class", "group", "change"),
    [
        (SpikeConfig, "spikes", {"window": 20}),
        (DivergenceConfig, "divergence", {"patience": 3}),
        (InstrumentConfig, "metrics", {"every": 5}),
    ],
)
def test_config_dataclasses_built_bare_are_the_composed_group(config_class, group, change):
    values = composed()[group]
    assert dataclasses.asdict(config_class()) == values
    assert dataclasses.asdict(config_class.from_config()) == values
    # a composed group's values win, key by key
    changed = {**values, **change}
    assert dataclasses.asdict(config_class.from_config(changed)) == changed


def norm_settings(module: nn.Module) -> dict:
    return {
        k: getattr(module, k) for k in ("eps", "momentum", "sync", "alpha_init") if hasattr(module, k)
    } | {"bias": getattr(module, "bias", None) is not None}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_a_norm_built_without_settings_is_the_composed_one(name):
    placement = "post" if name == "deepnorm" else "pre"
    spec = composed(f"norm={name}", f"placement={placement}")["norm"]
    assert spec["name"] == name
    from_config = build_norm(16, spec, context_length=8)
    bare = build_norm(16, {"name": name}, context_length=8)
    assert type(bare) is type(from_config)
    assert norm_settings(bare) == norm_settings(from_config)


def test_gpt_keyword_defaults_are_the_composed_model_group():
    model = composed()["model"]
    for name, parameter in inspect.signature(GPT).parameters.items():
        if parameter.default is not inspect.Parameter.empty:
            assert model[name] == parameter.default, name


def test_synthetic_corpus_defaults_are_the_composed_ones():
    data = composed()["data"]
    bare = SyntheticSource({})
    assert (bare.n_train, bare.n_val, bare.seed) == (
        data["n_train_stories"],
        data["n_val_stories"],
        data["corpus_seed"],
    )


def test_hub_defaults_are_the_composed_ones():
    data = composed("data=tinystories")["data"]
    bare = HubSource({}, "v2", progress=False)
    assert (bare.hub_id, bare.revision, bare.text_field) == (
        data["hub_id"],
        data["revision"],
        data["text_field"],
    )


@pytest.mark.parametrize("option", ["synthetic", "tinystories", "text"])
def test_tokenizer_defaults_are_the_composed_ones(option):
    data = composed(f"data={option}")["data"]
    assert tokenizer_spec({}) == tokenizer_spec(
        {k: data[k] for k in ("vocab_size", "tokenizer_train_stories")}
    )
