"""The config dataclasses: every option of every group passes its check, the composed config holds exactly
what the dataclasses declare, and bad values are refused with one sentence naming the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from normlab.config import GROUPS, checked, register
from normlab.config.compose import compose_config
from normlab.config.groups import RootConfig, config_class
from normlab.errors import InvalidConfig
from normlab.metrics.spikes import SpikeConfig
from normlab.model.norms import DynamicTanhConfig, qk_norms

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def compose_cfg(*overrides: str):
    return compose_config(["data=synthetic", *overrides])


def presets() -> list[str]:
    """configs/experiment's files, those in subfolders by their path (findings/xiong_warmup)."""
    folder = CONFIGS / "experiment"
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))


@pytest.mark.parametrize(
    "override",
    [f"{g}={o}" for g, options in GROUPS.items() for o in options] + [f"+experiment={o}" for o in presets()],
)
def test_every_option_passes_its_check(override):
    extra = ["placement=post"] if override == "norm=deepnorm" else []
    extra += ["data.path=corpus/"] if override == "data=text" else []
    cfg = checked(compose_cfg(override, *extra))
    assert cfg["depth"] >= 1


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_each_composed_group_holds_exactly_its_dataclass_fields_and_defaults(group):
    """What Hydra composes for `GROUP=OPTION` is the option's class defaults (with the option's own
    changes): no key the class does not declare, none it declares missing."""
    for name, option in GROUPS[group].items():
        extra = ["data.path=x"] if (group, name) == ("data", "text") else []
        node = compose_cfg(f"{group}={name}", *extra)[group]
        values = OmegaConf.to_container(node, resolve=False)
        cls = config_class(group, values)
        assert list(values) == [f.name for f in dataclasses.fields(cls)], (group, name)
        assert {k: v for k, v in values.items() if k != "path"} == {
            k: v for k, v in option.values().items() if k != "path"
        }


def test_the_top_level_is_the_root_dataclass():
    cfg = OmegaConf.to_container(compose_cfg(), resolve=False)
    top = {k: v for k, v in cfg.items() if k not in GROUPS}
    assert top == RootConfig.defaults()


def test_values_are_converted_to_their_declared_types():
    cfg = checked(compose_cfg("optim.lr=1", "model.embed_scale=2", "train.sample_prompt=123"))
    assert cfg["optim"]["lr"] == 1.0 and isinstance(cfg["optim"]["lr"], float)
    assert cfg["model"]["embed_scale"] == 2.0 and cfg["train"]["sample_prompt"] == "123"
    assert checked(compose_cfg("model.embed_scale=sqrt_d"))["model"]["embed_scale"] == "sqrt_d"


@pytest.mark.parametrize(
    ("override", "key", "takes"),
    [
        ("seed=1.5", "seed", "a whole number in [0, 18446744073709551615]"),
        ("train.progress=maybe", "train.progress", "one of auto, true, false"),
        ("metrics.model_update=1", "metrics.model_update", "one of auto, true, false"),  # 1 is not true
        ("model.dropout=true", "model.dropout", "a finite number in [0, 1)"),
        ("train.num_threads=0", "train.num_threads", "a whole number ≥ 1 or null"),
        ("logger.mode=sometimes", "logger.mode", "one of auto, online, offline, disabled"),
        ("spikes.sigma=inf", "spikes.sigma", "a finite number > 0"),
        ("model.embed_scale=-1", "model.embed_scale", "a finite number > 0, or sqrt_d"),
        ("model.init=kaiming", "model.init", "one of gpt2, xavier"),
        ("model.pos=rope", "model.pos", "one of learned, sinusoidal"),
        ("model.qk_norm=l2", "model.qk_norm", f"one of {', '.join(qk_norms())}"),
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


def test_the_options_are_in_hydras_config_store():
    from hydra.core.config_store import ConfigStore

    register()  # idempotent
    node = ConfigStore.instance().load("norm/dyt.yaml").node
    assert OmegaConf.to_container(node) == DynamicTanhConfig.defaults()
    assert "val_fraction" in ConfigStore.instance().load("data/text.yaml").node


def test_the_check_needs_no_config_store(monkeypatch):
    """A joblib worker may be handed a ConfigStore that never saw normlab's nodes: checking does not read it."""
    from hydra.core.config_store import ConfigStore

    cfg = compose_cfg()
    for group in GROUPS:
        monkeypatch.delitem(ConfigStore.instance().repo, group)
    assert checked(cfg)["train"]["batch_size"] >= 1


def test_a_config_built_in_code_is_checked_too():
    with pytest.raises(InvalidConfig) as info:
        SpikeConfig(sigma=0)
    assert str(info.value) == "spikes.sigma=0 is not allowed; spikes.sigma takes a finite number > 0."
    assert SpikeConfig.from_config(window=20).window == 20


def test_a_group_given_as_values_is_converted_and_checked_as_a_command_line_is():
    """`from_config` types a group's values as `checked` does (what a library caller or an old run's config
    passes may hold strings); a value that is not of the type is refused with the same sentence."""
    typed = SpikeConfig.from_config({"window": "20", "sigma": 6, "not_a_knob": 1})
    assert (typed.window, typed.sigma) == (20, 6.0) and isinstance(typed.sigma, float)
    with pytest.raises(InvalidConfig) as info:
        SpikeConfig.from_config({"window": "abc"})
    assert str(info.value) == "spikes.window=abc is not allowed; spikes.window takes a whole number ≥ 0."


def test_a_knob_of_another_norm_is_refused_except_deepnorms_base():
    with pytest.raises(InvalidConfig, match=r"^norm\.momentum is not a setting; "):
        checked(compose_cfg("norm=rms", "+norm.momentum=0.2"))
    cfg = checked(compose_cfg("norm=deepnorm", "placement=post", "norm.base=dyt", "+norm.alpha_init=0.7"))
    assert cfg["norm"]["alpha_init"] == 0.7
    with pytest.raises(InvalidConfig, match=r"^norm\.alpha_init=-1 is not allowed"):
        checked(compose_cfg("norm=deepnorm", "placement=post", "norm.base=dyt", "+norm.alpha_init=-1"))


def test_min_history_above_the_window_is_invalid():
    with pytest.raises(InvalidConfig, match=r"spikes\.min_history=20 is above spikes\.window=10.*\.$"):
        checked(compose_cfg("spikes.window=10", "spikes.min_history=20"))
    checked(compose_cfg("spikes.window=0", "spikes.min_history=20"))  # detector off: no constraint


def test_every_schedule_option_is_a_decay_the_loop_implements():
    from normlab.config.groups import SCHEDULES
    from normlab.train.schedule import DECAYS

    assert list(SCHEDULES) == list(DECAYS)


def test_a_yaml_preset_of_a_group_composes_over_its_dataclass_option(tmp_path):
    """YAML stays the place for presets: a file `model/NAME.yaml` that starts from an option the dataclasses
    define and changes a few knobs is a new option of the group, checked like any other."""
    import shutil

    from normlab.configs import CONFIG_DIR

    config_dir = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, config_dir, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (config_dir / "model").mkdir()
    (config_dir / "model" / "wide.yaml").write_text(
        "defaults:\n  - small\n  - _self_\nd_model: 256\nn_heads: 8\n"
    )
    cfg = checked(compose_config(["data=synthetic", "model=wide"], config_dir=config_dir))
    assert (cfg["model"]["d_model"], cfg["model"]["n_heads"], cfg["model"]["context_length"]) == (256, 8, 128)
    with pytest.raises(InvalidConfig, match=r"^model\.n_heads=0 is not allowed"):
        checked(compose_config(["data=synthetic", "model=wide", "model.n_heads=0"], config_dir=config_dir))
