"""Values a config takes from the environment (`${oc.env:NAME}`), shown as written, never as their value.

An environment variable can hold a secret (`name=${oc.env:WANDB_API_KEY}` by mistake, a token in a path);
what a run writes for people to read — summary.json's description of the run, its log lines, a refusal's
sentence — shows `${oc.env:NAME}` where the config says so, and the run computes with the value. A setting
built from such a value (`name: …-s${seed}` with `seed=${oc.env:SEED}`) shows the call in its place too:
`ln-pre-L6-w100-s${oc.env:SEED}`. (The config Hydra saves in `.hydra/config.yaml` is as written already.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normlab.config.keys import flatten

ENV_CALL = re.compile(r"\$\{\s*oc\.env\s*:")
SHORTEST = 3  # a value this short is not searched for in free text (it would match inside other words)


def _kept_as_written(tree: Any) -> Any:
    """Every string that calls oc.env, escaped so that resolving keeps the call as text."""
    if isinstance(tree, dict):
        return {k: _kept_as_written(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_kept_as_written(v) for v in tree]
    if isinstance(tree, str) and ENV_CALL.search(tree):
        return tree.replace("\\${", "${").replace("${", "\\${")
    return tree


def from_environment(cfg: DictConfig | Mapping[str, Any]) -> dict[str, tuple[Any, str]]:
    """key → (its value, how it is shown) for every setting whose value comes from `${oc.env:…}`, directly
    or through a reference; empty where none does, or the config cannot be resolved either way."""
    if not OmegaConf.is_config(cfg):
        return {}
    raw = OmegaConf.to_container(cfg, resolve=False)
    if not isinstance(raw, dict) or not ENV_CALL.search(repr(raw)):
        return {}
    task = {k: v for k, v in raw.items() if k != "hydra"}
    try:
        values = flatten(OmegaConf.to_container(OmegaConf.create(task), resolve=True))  # type: ignore[arg-type]
        written = flatten(
            OmegaConf.to_container(OmegaConf.create(_kept_as_written(task)), resolve=True)  # type: ignore[arg-type]
        )
    except Exception:  # a broken reference: the check says so, in its own sentence
        return {}
    return {
        k: (values[k], str(written[k]))
        for k in values
        if k in written and written[k] != values[k] and ENV_CALL.search(str(written[k]))
    }


def shown_as_written(text: str, cfg: DictConfig | Mapping[str, Any]) -> str:
    """`text` (a refusal, a reason) with every value that came from the environment replaced by the
    `${oc.env:…}` it came from."""
    from normlab.knobs import shown

    env = from_environment(cfg)
    for key, (value, written) in sorted(env.items(), key=lambda kv: -len(str(kv[1][0]))):
        text = text.replace(f"{key}={shown(value)}", f"{key}={written}")
        if isinstance(value, str) and len(value) >= SHORTEST:
            text = text.replace(value, written)
    return text
