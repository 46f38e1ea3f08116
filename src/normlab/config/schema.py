"""What every config value may be: one dataclass per config group, with types, ranges and choices.

The defaults, and the comments users read, stay in the YAML files under configs/; these classes declare
only what a value must be. Each field's annotation is its type (checked by OmegaConf, the library Hydra's
structured configs use) and `knob(...)` adds its range or its choices. `normlab.config.check` applies them
when a job starts, before anything is built, so a bad value ends the job as `status: invalid` with one
sentence naming the key, the value and what it takes.

A key missing here is refused ("… is not a setting"): a new knob is one YAML line with its comment plus one
line here. Groups with several options whose keys differ (data, logger) have one class per option.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

# Optional[...] instead of `X | None` below: OmegaConf reads these annotations at runtime (Python 3.10).
# ruff: noqa: UP007, UP045


@dataclass(frozen=True)
class Rule:
    """What a value of the right type must also satisfy. `choices` may be a callable returning them (the
    registries of norms and placements live with the model code and are looked up only when checking)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    length: int | None = None  # lists: exact number of items
    also: str | None = None  # a value accepted besides the range (e.g. "sqrt_d" for a number)


def knob(**rule: Any) -> Any:
    """A schema field: no default (the YAML has it), plus its Rule."""
    return field(default=MISSING, metadata={"rule": Rule(**rule)})


def _norms() -> Sequence[str]:
    from normlab.model.norms import NORMS

    return tuple(NORMS)


def _placements() -> Sequence[str]:
    from normlab.model.placements import PLACEMENTS

    return tuple(PLACEMENTS)


def _schedules() -> Sequence[str]:
    from normlab.train.schedule import DECAYS

    return tuple(DECAYS)


def _model_choices(name: str) -> Callable[[], Sequence[str]]:
    """Choices the model code defines (normlab.model.variant.INITS, ...), looked up when checking."""

    def choices() -> Sequence[str]:
        from normlab.model import variant

        return getattr(variant, name)

    return choices


def _qk_norms() -> Sequence[str]:
    from normlab.model.norms import qk_norms

    return qk_norms()


def _deepnorm_bases() -> Sequence[str]:
    from normlab.model.norms import DEEPNORM_BASES

    return DEEPNORM_BASES


INITS = _model_choices("INITS")
POSITIONS = _model_choices("POSITIONS")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "fp16")
WANDB_MODES = ("auto", "online", "offline", "disabled")
TINYSTORIES_VERSIONS = ("v1", "v2")
MIN_BPE_VOCAB = 258  # 256 byte tokens + end-of-text + at least one merge


@dataclass
class RootSchema:
    """Top-level knobs (configs/config.yaml)."""

    depth: int = knob(ge=1)
    warmup_steps: int = knob(ge=0)
    seed: int = knob(ge=0)
    name: str = knob()
    experiment_name: str = knob()


@dataclass
class ModelSchema:
    """configs/model/*.yaml"""

    _target_: str = knob()
    _convert_: str = knob()
    vocab_size: int = knob(ge=1)
    context_length: int = knob(ge=1)
    d_model: int = knob(ge=1)
    n_heads: int = knob(ge=1)
    n_layers: int = knob(ge=1)
    norm: Any = knob()  # a copy of the `norm` group, checked there
    placement: Any = knob()  # a copy of the `placement` group, checked there
    dropout: float = knob(ge=0, lt=1)
    bias: bool = knob()
    pos: str = knob(choices=POSITIONS)
    tie_embeddings: bool = knob()
    init: str = knob(choices=INITS)
    embed_scale: Any = knob(gt=0, also="sqrt_d")
    ffn_mult: int = knob(ge=1)
    qk_norm: str = knob(choices=_qk_norms)


@dataclass
class NormSchema:
    """configs/norm/*.yaml (each norm uses some of these keys)."""

    name: str = knob(choices=_norms)
    eps: float = knob(gt=0)
    bias: bool = knob()
    momentum: float = knob(ge=0, le=1)
    sync: bool = knob()
    alpha_init: float = knob(gt=0)
    base: str = knob(choices=_deepnorm_bases)


@dataclass
class PlacementSchema:
    """configs/placement/*.yaml (each placement uses some of these keys)."""

    name: str = knob(choices=_placements)
    post_fraction: float = knob(ge=0, le=1)


@dataclass
class ScheduleSchema:
    name: str = knob(choices=_schedules)


@dataclass
class OptimSchema:
    """configs/optim/adamw.yaml"""

    name: str = knob(choices=("adamw",))
    lr: float = knob(gt=0)
    min_lr: float = knob(ge=0)
    betas: list[float] = knob(ge=0, lt=1, length=2)
    eps: float = knob(gt=0)
    weight_decay: float = knob(ge=0)
    decay_embeddings: bool = knob()
    z_loss: float = knob(ge=0)


@dataclass
class TrainSchema:
    """configs/train/default.yaml"""

    batch_size: int = knob(ge=1)
    seq_len: int = knob(ge=1)
    max_steps: int = knob(ge=0)
    grad_accum: int = knob(ge=1)
    grad_clip: float = knob(ge=0)
    eval_every: int = knob(ge=0)
    eval_batches: int = knob(ge=1)
    eval_at_start: bool = knob()
    ckpt_every: int = knob(ge=0)
    resume: Optional[str] = knob()
    device: str = knob(choices=DEVICES)
    precision: str = knob(choices=PRECISIONS)
    compile: bool = knob()
    peak_flops: Optional[float] = knob(gt=0)
    num_threads: Optional[int] = knob(ge=1)
    flush_every: int = knob(ge=1)
    sample_tokens: int = knob(ge=0)
    sample_prompt: str = knob()
    progress: Any = knob(choices=("auto", True, False))


@dataclass
class DataSchema:
    """Keys every corpus has."""

    name: str = knob(choices=("synthetic", "tinystories", "text"))
    vocab_size: int = knob(ge=MIN_BPE_VOCAB)
    tokenizer_train_stories: Optional[int] = knob(ge=1)
    tokenizer_path: Optional[str] = knob()
    cache_dir: Optional[str] = knob()


@dataclass
class SyntheticDataSchema(DataSchema):
    """configs/data/synthetic.yaml"""

    n_train_stories: int = knob(ge=1)
    n_val_stories: int = knob(ge=1)
    corpus_seed: int = knob(ge=0)


@dataclass
class TinyStoriesDataSchema(DataSchema):
    """configs/data/tinystories.yaml"""

    path: Optional[str] = knob()
    hub_id: str = knob()
    revision: str = knob()
    version: Optional[str] = knob(choices=TINYSTORIES_VERSIONS)
    max_train_stories: Optional[int] = knob(ge=1)
    max_val_stories: Optional[int] = knob(ge=1)
    text_field: str = knob()


@dataclass
class TextDataSchema(DataSchema):
    """configs/data/text.yaml"""

    path: Optional[str] = knob()
    val_path: Optional[str] = knob()
    val_fraction: float = knob(gt=0, lt=1)
    separator: Optional[str] = knob()
    text_field: str = knob()
    max_train_stories: Optional[int] = knob(ge=1)
    max_val_stories: Optional[int] = knob(ge=1)


@dataclass
class MetricsSchema:
    """configs/metrics/default.yaml"""

    enabled: bool = knob()
    every: int = knob(ge=0)
    dense_until: int = knob(ge=0)
    histogram_every: int = knob(ge=0)
    histogram_bins: int = knob(ge=1)
    model_update: Any = knob(choices=("auto", True, False))
    probe_batch: int = knob(ge=1)
    layer_ablation: bool = knob()


@dataclass
class SpikesSchema:
    """configs/spikes/default.yaml"""

    window: int = knob(ge=0)
    sigma: float = knob(gt=0)
    trend: int = knob(ge=1)
    min_history: int = knob(ge=2)
    history: int = knob(ge=0)


@dataclass
class DivergenceSchema:
    """configs/divergence/default.yaml"""

    max_loss_ratio: Optional[float] = knob(gt=0)
    patience: int = knob(ge=1)


@dataclass
class NoLoggerSchema:
    name: str = knob(choices=("none", "wandb"))


@dataclass
class WandbLoggerSchema(NoLoggerSchema):
    """configs/logger/wandb.yaml"""

    project: str = knob()
    entity: Optional[str] = knob()
    mode: str = knob(choices=WANDB_MODES)
    job_type: Optional[str] = knob()
    tags: list[str] = knob()
    init_timeout: float = knob(gt=0)
    system_stats: bool = knob()
    finish_timeout: float = knob(ge=0)


# group → schema, or group → {option's `name` → schema} where the options' keys differ
GROUP_SCHEMAS: dict[str, type | dict[str, type]] = {
    "model": ModelSchema,
    "norm": NormSchema,
    "placement": PlacementSchema,
    "schedule": ScheduleSchema,
    "optim": OptimSchema,
    "train": TrainSchema,
    "data": {
        "synthetic": SyntheticDataSchema,
        "tinystories": TinyStoriesDataSchema,
        "text": TextDataSchema,
    },
    "metrics": MetricsSchema,
    "spikes": SpikesSchema,
    "divergence": DivergenceSchema,
    "logger": {"none": NoLoggerSchema, "wandb": WandbLoggerSchema},
}
# Groups checked first: a bad value there would otherwise show up in a key that interpolates it.
CHECK_ORDER = (
    "model",
    "norm",
    "placement",
    "schedule",
    "optim",
    "data",
    "train",
    "metrics",
    "spikes",
    "divergence",
    "logger",
)
STORE_GROUP = "normlab_schema"


def store_name(group: str | None, option: str | None = None) -> str:
    """The ConfigStore name of a schema: `root`, `train`, `data_text`, ..."""
    if group is None:
        return "root"
    return f"{group}_{option}" if option is not None else group


def register() -> None:
    """Put every schema in Hydra's ConfigStore, group `normlab_schema` (`normlab_schema/root`,
    `normlab_schema/train`, `normlab_schema/data_text`, ...), where `normlab.config.check` reads them."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(group=STORE_GROUP, name=store_name(None), node=RootSchema, provider="normlab")
    for group, schema in GROUP_SCHEMAS.items():
        options = schema.items() if isinstance(schema, dict) else [(None, schema)]
        for option, option_schema in options:
            cs.store(
                group=STORE_GROUP, name=store_name(group, option), node=option_schema, provider="normlab"
            )


register()
