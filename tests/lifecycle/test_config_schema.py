"""The config schemas: every YAML option passes them, every declared key exists, bad values are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from normlab.config import checked, register
from normlab.config.compose import compose_config
from normlab.config.schema import GROUP_SCHEMAS, STORE_GROUP, RootSchema
from normlab.errors import InvalidConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# Keys other work adds (CONTRACTS.md), declared ahead so that their YAML lines are accepted when they land.
DECLARED_AHEAD = {"model.qk_norm", "optim.z_loss", "train.eval_at_start", "train.compile"}


def compose_cfg(*overrides: str):
    return compose_config(["data=synthetic", *overrides])


def options(group: str) -> list[str]:
    """A group's files, those in subfolders by their path (experiment: findings/xiong_warmup)."""
    folder = CONFIGS / group
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))


@pytest.mark.parametrize(
    "override",
    [
        f"{g}={o}"
        for g in (
            "model",
            "norm",
            "placement",
            "schedule",
            "optim",
            "train",
            "metrics",
            "spikes",
            "divergence",
            "logger",
            "data",
        )
        for o in options(g)
    ]
    + [f"+experiment={o}" for o in options("experiment")],
)
def test_every_option_in_configs_passes_the_schemas(override):
    extra = ["placement=post"] if override == "norm=deepnorm" else []
    extra += ["data.path=corpus/"] if override == "data=text" else []
    cfg = checked(compose_cfg(override, *extra))
    assert cfg["depth"] >= 1


def yaml_keys() -> set[str]:
    keys = set(yaml.safe_load((CONFIGS / "config.yaml").read_text())) - {"defaults", "hydra"}
    for group in GROUP_SCHEMAS:
        for path in (CONFIGS / group).glob("*.yaml"):
            keys |= {f"{group}.{k}" for k in (yaml.safe_load(path.read_text()) or {}) if k != "defaults"}
    return keys


def test_every_declared_key_is_in_a_yaml_file():
    declared = {f.name for f in dataclasses.fields(RootSchema)}
    for group, schema in GROUP_SCHEMAS.items():
        for s in schema.values() if isinstance(schema, dict) else (schema,):
            declared |= {f"{group}.{f.name}" for f in dataclasses.fields(s)}
    assert declared - yaml_keys() <= DECLARED_AHEAD  # nothing declared that no YAML sets, but those
    assert yaml_keys() <= declared  # and every YAML key is declared (else every run would be invalid)


def test_values_are_converted_to_their_declared_types():
    cfg = checked(compose_cfg("optim.lr=1", "model.embed_scale=2", "train.sample_prompt=123"))
    assert cfg["optim"]["lr"] == 1.0 and isinstance(cfg["optim"]["lr"], float)
    assert cfg["model"]["embed_scale"] == 2.0 and cfg["train"]["sample_prompt"] == "123"
    assert checked(compose_cfg("model.embed_scale=sqrt_d"))["model"]["embed_scale"] == "sqrt_d"


@pytest.mark.parametrize(
    ("override", "key", "takes"),
    [
        ("seed=1.5", "seed", "a whole number ≥ 0"),
        ("train.progress=maybe", "train.progress", "one of auto, true, false"),
        ("metrics.model_update=1", "metrics.model_update", "one of auto, true, false"),  # 1 is not true
        ("model.dropout=true", "model.dropout", "a finite number in [0, 1)"),
        ("train.num_threads=0", "train.num_threads", "a whole number ≥ 1 or null"),
        ("logger.mode=sometimes", "logger.mode", "one of auto, online, offline, disabled"),
        ("spikes.sigma=inf", "spikes.sigma", "a finite number > 0"),
        ("model.embed_scale=-1", "model.embed_scale", "a finite number > 0, or sqrt_d"),
        ("model.init=kaiming", "model.init", "one of gpt2, xavier"),
        ("model.pos=rope", "model.pos", "one of learned, sinusoidal"),
        ("model.qk_norm=l2", "model.qk_norm", "one of none, ln, rms, dyt, scalenorm"),
        ("optim.z_loss=-0.5", "optim.z_loss", "a finite number ≥ 0"),
        ("optim.z_loss=big", "optim.z_loss", "a finite number ≥ 0"),
        ("spikes.trend=0", "spikes.trend", "a whole number ≥ 1"),
        ("spikes.min_history=1", "spikes.min_history", "a whole number ≥ 2"),
    ],
)
def test_bad_values_name_key_value_and_what_it_takes(override, key, takes):
    with pytest.raises(InvalidConfig) as info:
        checked(compose_cfg(override))
    value = override.split("=", 1)[1]
    assert str(info.value) == f"{key}={value} is not allowed; {key} takes {takes}."
    assert info.value.key == key


def test_a_broken_reference_is_invalid_not_a_crash():
    with pytest.raises(InvalidConfig, match=r"^name could not be resolved"):
        checked(compose_cfg("name=${nope}"))


def test_the_schemas_are_in_hydras_config_store():
    from hydra.core.config_store import ConfigStore

    register()  # also done on import; idempotent
    node = ConfigStore.instance().load(f"{STORE_GROUP}/train.yaml").node
    assert {"batch_size", "precision", "resume"} <= set(node.keys())
    assert "val_fraction" in set(ConfigStore.instance().load(f"{STORE_GROUP}/data_text.yaml").node.keys())


def test_the_check_survives_a_replaced_config_store(monkeypatch):
    """Hydra's joblib launcher hands each job the parent's ConfigStore, which never imported the schemas."""
    from hydra.core.config_store import ConfigStore

    monkeypatch.delitem(ConfigStore.instance().repo, STORE_GROUP)
    assert checked(compose_cfg())["train"]["batch_size"] >= 1


def test_min_history_above_the_window_is_invalid():
    with pytest.raises(InvalidConfig, match=r"spikes\.min_history=20 is above spikes\.window=10.*\.$"):
        checked(compose_cfg("spikes.window=10", "spikes.min_history=20"))
    checked(compose_cfg("spikes.window=0", "spikes.min_history=20"))  # detector off: no constraint
