"""The YAML under configs/ is the one place a default is written: code given a partial spec (a norm built
with only its name, a corpus source from an empty dict, a config dataclass built without values) takes the
missing values from there. Each test builds the thing bare and compares with the YAML read here."""

from __future__ import annotations

import dataclasses

import pytest
import torch.nn as nn
from omegaconf import OmegaConf

from normlab.configs import CONFIG_DIR
from normlab.data.corpus import tokenizer_spec
from normlab.data.hub import HubSource
from normlab.data.sources import SyntheticSource
from normlab.metrics.divergence import DivergenceConfig
from normlab.metrics.instruments import InstrumentConfig
from normlab.metrics.spikes import SpikeConfig
from normlab.model.norms import NORMS, build_norm


def yaml_defaults(group: str, option: str = "default") -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"))


@pytest.mark.parametrize(
    ("config_class", "group"),
    [(SpikeConfig, "spikes"), (DivergenceConfig, "divergence"), (InstrumentConfig, "metrics")],
)
def test_config_dataclasses_take_their_defaults_from_the_yaml_alone(config_class, group):
    fields = dataclasses.fields(config_class)
    assert all(f.default is dataclasses.MISSING for f in fields), "a default written in code as well"
    yaml = yaml_defaults(group)
    assert {f.name for f in fields} == set(yaml), f"{config_class.__name__} and configs/{group}/default.yaml"
    assert dataclasses.asdict(config_class.from_config()) == yaml
    # a composed group's values win, key by key
    changed = {**yaml, next(iter(yaml)): 0}
    assert dataclasses.asdict(config_class.from_config(changed)) == changed


def norm_settings(module: nn.Module) -> dict:
    return {
        k: getattr(module, k) for k in ("eps", "momentum", "sync", "alpha_init") if hasattr(module, k)
    } | {"bias": getattr(module, "bias", None) is not None}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_a_norm_built_without_settings_uses_its_yaml_defaults(name):
    spec = yaml_defaults("norm", name)
    assert spec["name"] == name
    from_yaml = build_norm(16, spec, context_length=8)
    bare = build_norm(16, {"name": name}, context_length=8)
    assert type(bare) is type(from_yaml)
    assert norm_settings(bare) == norm_settings(from_yaml)


def test_synthetic_corpus_defaults_are_the_yaml_defaults():
    yaml = yaml_defaults("data", "synthetic")
    bare = SyntheticSource({})
    assert (bare.n_train, bare.n_val, bare.seed) == (
        yaml["n_train_stories"],
        yaml["n_val_stories"],
        yaml["corpus_seed"],
    )


def test_hub_defaults_are_the_yaml_defaults():
    yaml = yaml_defaults("data", "tinystories")
    bare = HubSource({}, "v2", progress=False)
    assert (bare.hub_id, bare.revision, bare.text_field) == (
        yaml["hub_id"],
        yaml["revision"],
        yaml["text_field"],
    )


@pytest.mark.parametrize("option", ["synthetic", "tinystories", "text"])
def test_tokenizer_defaults_are_the_yaml_defaults(option):
    yaml = yaml_defaults("data", option)
    assert tokenizer_spec({}) == tokenizer_spec(
        {k: yaml[k] for k in ("vocab_size", "tokenizer_train_stories")}
    )
