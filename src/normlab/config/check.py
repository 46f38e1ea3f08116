"""Check a composed config against its dataclasses: one sentence for the first bad value or combination.

`checked(cfg)` returns the resolved config as plain containers, with values converted to their declared
types (an int given for a float becomes a float, ...), or raises `InvalidConfig` naming the key, the value
and what the key takes. Keys are checked top-level first, then group by group in `CHECK_ORDER`, so a bad
`depth` is reported as `depth`, not as `model.n_layers` (which copies it); then the combinations.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normlab.config.groups import CHECK_ORDER, GROUPS, RootConfig, config_class
from normlab.errors import InvalidConfig
from normlab.knobs import checked_values, shown
from normlab.model.variant import InvalidVariant, check_heads, check_variant

__all__ = ["check_combinations", "checked", "resolved", "shown"]


def resolved(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as plain containers with every ${...} resolved; a broken reference is InvalidConfig."""
    if not OmegaConf.is_config(cfg):
        return dict(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "the config"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidConfig(
            f"{key} could not be resolved ({first}); fix that value or the ${{...}} reference in it.", key
        ) from None


def checked(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The resolved, type-converted config; InvalidConfig for the first bad value or combination."""
    plain = resolved(cfg)
    out = checked_values(RootConfig, {k: v for k, v in plain.items() if k not in GROUPS})
    for group in CHECK_ORDER:
        if group in plain:
            values = plain[group]
            if not isinstance(values, Mapping):
                raise InvalidConfig(
                    f"{group}={shown(values)} is not a config group option; python train.py --help lists "
                    f"the options of {group}.",
                    group,
                )
            out[group] = checked_values(config_class(group, values), values)
    check_combinations(out)
    return {k: out[k] for k in plain}


def check_combinations(cfg: Mapping[str, Any]) -> None:
    """Values that are fine alone but not together."""
    try:
        check_variant(cfg["norm"], cfg["placement"])
    except InvalidVariant as e:
        raise InvalidConfig(str(e), "placement") from None
    model, train, optim = cfg["model"], cfg["train"], cfg["optim"]
    check_model_target(model)
    check_batch_norm_batch(cfg["norm"], train)
    check_resume_allow(train.get("resume_allow") or [])
    if train["seq_len"] > model["context_length"]:
        raise InvalidConfig(
            f"train.seq_len={train['seq_len']} exceeds model.context_length={model['context_length']}; "
            "lower train.seq_len or raise model.context_length.",
            "train.seq_len",
        )
    try:
        check_heads(model["d_model"], model["n_heads"])
    except InvalidVariant as e:
        raise InvalidConfig(str(e), "model.n_heads") from None
    if optim["min_lr"] > optim["lr"]:
        raise InvalidConfig(
            f"optim.min_lr={shown(optim['min_lr'])} is above optim.lr={shown(optim['lr'])}; the schedule decays "
            "from optim.lr down to optim.min_lr, so set optim.min_lr ≤ optim.lr.",
            "optim.min_lr",
        )
    spikes = cfg.get("spikes")
    if spikes and spikes["window"] > 0 and spikes["min_history"] > spikes["window"]:
        raise InvalidConfig(
            f"spikes.min_history={spikes['min_history']} is above spikes.window={spikes['window']}; the "
            "detector needs that many ratios in its window, so set spikes.min_history ≤ spikes.window.",
            "spikes.min_history",
        )
    data = cfg["data"]
    if data["name"] == "text" and not data.get("path"):
        raise InvalidConfig(
            "data=text needs a corpus: set data.path=FILE_OR_DIR (.txt, .jsonl or .parquet files).",
            "data.path",
        )


def check_model_target(model: Mapping[str, Any]) -> None:
    """`model._target_` (and `_convert_`) are how Hydra builds the GPT, not settings: never from a command line."""
    from normlab.model.config import ModelConfig

    for key in ("_target_", "_convert_"):
        value, expected = model.get(key), getattr(ModelConfig, key)
        if value != expected:
            raise InvalidConfig(
                f"model.{key}={shown(value)} cannot be set: the model is always {ModelConfig._target_}, built by "
                "normlab; choose its variant with norm=, placement=, depth= and the model.* settings.",
                f"model.{key}",
            )


def check_batch_norm_batch(norm: Mapping[str, Any], train: Mapping[str, Any]) -> None:
    """BatchNorm normalises each position over the sequences of a batch: one sequence is nothing to normalise."""
    uses_bn = norm.get("name") == "bn" or (norm.get("name") == "deepnorm" and norm.get("base") == "bn")
    if not uses_bn:
        return
    ranks = int(os.environ.get("WORLD_SIZE", "1") or 1) if norm.get("sync") else 1
    if train["batch_size"] * ranks < 2:
        raise InvalidConfig(
            f"norm=bn normalises each position over the sequences of a batch, and train.batch_size="
            f"{train['batch_size']} gives it one value per feature and position (variance 0: nothing to "
            "normalise, as torch's BatchNorm refuses); use train.batch_size ≥ 2 or another norm.",
            "train.batch_size",
        )


def check_resume_allow(allow: list[str]) -> None:
    """Every entry of train.resume_allow names a setting, a group or missing_rows."""
    import difflib

    from normlab.config.groups import MISSING_ROWS, settings

    known = {*settings(), *GROUPS, MISSING_ROWS}
    for entry in allow:
        if entry not in known:
            close = difflib.get_close_matches(entry, sorted(known), n=1, cutoff=0.6)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else "it takes settings, groups (e.g. data) or missing_rows."
            )
            raise InvalidConfig(
                f"train.resume_allow names {entry}, which is neither a setting nor a group; {hint}",
                "train.resume_allow",
            )
