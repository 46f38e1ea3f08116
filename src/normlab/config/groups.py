"""Every config group and its options: the one place a knob is defined is its config dataclass.

The classes of the groups whose code lives below (norms, placements and the GPT in model/, corpora in data/,
instruments, spikes, divergence and loggers in metrics/) are declared there, next to that code; the top
level and the groups of the training loop (optim, schedule, train) are declared here. `GROUPS` lists each
group's options (`norm=rms`, `model=tiny`, ...) with the class that types and checks them, and what
`--help` says of each; `normlab.config.store` puts them in Hydra's ConfigStore, where configs/config.yaml's
defaults list finds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from normlab.data.config import DATA
from normlab.errors import InvalidConfig
from normlab.knobs import Knobs, choices, fields_of, knob, shown
from normlab.metrics.divergence import DivergenceConfig
from normlab.metrics.instruments import InstrumentConfig
from normlab.metrics.spikes import SpikeConfig
from normlab.metrics.wandb_sink import LOGGERS
from normlab.model.config import SIZES, ModelConfig
from normlab.model.norms import NORMS, RECIPES
from normlab.model.placements import PLACEMENTS

# Optional[...] instead of `X | None`: OmegaConf reads these annotations at run time.
# ruff: noqa: UP007, UP045


@dataclass(frozen=True)
class RootConfig(Knobs):
    """Top-level knobs: `python train.py depth=12 warmup_steps=0 seed=1`."""

    depth: int = knob(6, "number of Transformer blocks", ge=1)
    warmup_steps: int = knob(100, "linear learning-rate warmup from 0, in optimizer steps (0 = none)", ge=0)
    seed: int = knob(0, "seed of model init, batch sampling and dropout", ge=0, le=2**64 - 1)
    name: str = knob(
        "${norm.name}-${placement.name}-L${depth}-w${warmup_steps}-s${seed}",
        "run name (W&B name, run directory suffix); built from what distinguishes runs in a sweep",
    )
    experiment_name: str = knob(
        "default",
        "the W&B group of a single run and the title of its plots; presets in configs/experiment/ set it",
    )


# schedule=NAME: the lr shape after warmup (normlab.train.schedule.DECAYS implements each)
SCHEDULES = {
    "cosine": "after warmup: cosine decay from optim.lr to optim.min_lr at train.max_steps",
    "linear": "after warmup: linear decay from optim.lr to optim.min_lr at train.max_steps",
    "constant": "after warmup: optim.lr until the end",
}


@dataclass(frozen=True)
class ScheduleConfig(Knobs):
    """The learning-rate schedule after warmup."""

    GROUP: ClassVar[str] = "schedule"
    name: str = knob("cosine", "the schedule (schedule=NAME)", choices=tuple(SCHEDULES))


@dataclass(frozen=True)
class OptimConfig(Knobs):
    """AdamW; weight decay on weight matrices only"""

    GROUP: ClassVar[str] = "optim"
    name: str = knob(
        "adamw",
        "the optimizer (train/optim.py builds AdamW; the only choice today, kept so a run's config names it)",
        choices=("adamw",),
    )
    lr: float = knob(3e-3, "peak learning rate (reached after warmup_steps)", gt=0)
    min_lr: float = knob(3e-4, "floor of the decay schedules", ge=0)
    betas: list[float] = knob(
        [0.9, 0.95],
        "AdamW's decay rates of the first and second moment estimates (β₁, β₂)",
        ge=0,
        lt=1,
        length=2,
    )
    eps: float = knob(1e-8, "AdamW's ε, added to √v̂ in the denominator", gt=0)
    weight_decay: float = knob(
        0.1,
        "decoupled weight decay on the weight matrices (norm gains, biases and, by default, embeddings excluded)",
        ge=0,
    )
    decay_embeddings: bool = knob(False, "also decay the token / position embeddings (and the tied head)")
    z_loss: float = knob(
        0.0,
        "z-loss coefficient c (0 = off): the training objective adds c · mean over positions of (log Z)², Z the "
        "output softmax's normaliser Σ_v exp(logit_v) (PaLM; Wortsman et al. 2023 use 1e-4). Only the gradient "
        "sees it: the logged `loss` stays the cross-entropy",
        ge=0,
    )


# train.resume_allow=[missing_rows]: a resume may continue across steps metrics.jsonl has no row for
MISSING_ROWS = "missing_rows"


@dataclass(frozen=True)
class TrainConfig(Knobs):
    """The training loop: batches, steps, evaluation, checkpoints, device and precision."""

    GROUP: ClassVar[str] = "train"
    batch_size: int = knob(32, "sequences per micro-batch", ge=1)
    seq_len: int = knob("${model.context_length}", "tokens per sequence (≤ model.context_length)", ge=1)
    max_steps: int = knob(2000, "optimizer steps (0 = measure the step-0 gradient profile only)", ge=0)
    grad_accum: int = knob(1, "micro-batches accumulated per optimizer step", ge=1)
    grad_clip: float = knob(
        1.0,
        "clip the global gradient norm to this value (0 = off); logged grad_norm is before clipping",
        ge=0,
    )
    eval_every: int = knob(200, "evaluate every this many steps (and at the end); 0 = only at the end", ge=0)
    eval_at_start: bool = knob(
        False,
        "also evaluate at step 0, before any update (experiments that compare against the initial val loss); "
        "false saves a run eval_batches forward passes (the step-0 gradient profile does not need them)",
    )
    eval_at: list[int] = knob(
        [],
        "extra evaluations before these steps, besides eval_every's, e.g. [1,2,5,50] for the first steps "
        "where instabilities live (0 evaluates at the start, as eval_at_start)",
        ge=0,
    )
    eval_batches: int = knob(20, "validation batches per evaluation (the same windows every time)", ge=1)
    ckpt_every: int = knob(0, "checkpoint every this many steps (and at the end); 0 = only at the end", ge=0)
    resume: Optional[str] = knob(
        None,
        "continue a run: a run directory (its newest checkpoint) or a .pt file (null = fresh run); add "
        "hydra.run.dir=THAT_DIR to append to its metrics.jsonl (the command an interrupted run prints does both). "
        "auto: continue the run in hydra.run.dir whatever state it is in — skip it if completed, resume it from "
        "its newest checkpoint, or start it (again, if it died before saving one); a sweep's continue command "
        "uses it",
    )
    resume_allow: list[str] = knob(
        [],
        "what a resume may change on purpose (otherwise it is refused: a resume continues the same experiment): "
        "settings or groups whose values differ from the checkpoint's, e.g. [optim.lr,seed] ([data] also allows "
        "another corpus), and missing_rows to continue across steps metrics.jsonl has no row for; recorded in "
        "summary.json (resume_changes, missing_steps) and marked in metrics.jsonl (resume/changed, resume/gap)",
    )
    device: str = knob("auto", "auto | cpu | cuda", choices=("auto", "cpu", "cuda"))
    precision: str = knob(
        "fp32", "fp32 | bf16 | fp16 (autocast; fp16 adds a gradient scaler)", choices=("fp32", "bf16", "fp16")
    )
    compile: bool = knob(
        False,
        "torch.compile the training forward (Inductor; on a CPU it needs a C++ compiler, else the run trains "
        "uncompiled with a warning). Compiling takes 15-20 s on 2 CPU cores; it pays off on runs of more than a "
        "few hundred steps (docs/performance.md)",
    )
    compile_mode: str = knob(
        "default",
        "how train.compile compiles: default (torch.compile's own) | tuned (Inductor also tunes each generated "
        "kernel's launch configuration by coordinate descent: longer to compile, sometimes faster to run) | "
        "max-autotune (also benchmarks matrix-product kernels; minutes to compile, for long GPU runs) | "
        "reduce-overhead (CUDA graphs on a GPU: each step replays recorded graphs, for steps whose time is the "
        "host's, a stack of small runs; docs/performance.md says what it was measured to give)",
        choices=("default", "tuned", "max-autotune", "reduce-overhead"),
    )
    peak_flops: Optional[float] = knob(
        None,
        "the device's peak FLOP/s for the `mfu` metric (tokens/s × FLOPs per token ÷ peak; docs/metrics.md); "
        "null = the data-sheet number of a known GPU at this precision (A100, H100, H200, L4, L40, L40S), none on "
        "a CPU",
        gt=0,
    )
    num_threads: Optional[int] = knob(
        None,
        "torch threads per run; null = all cores, or 1 per job under the joblib launcher (the cores divided by "
        "hydra.launcher.n_jobs under the stacked launcher)",
        ge=1,
    )
    flush_every: int = knob(
        10, "move metrics to the host every this many steps (fewer device syncs on GPU)", ge=1
    )
    sample_tokens: int = knob(120, "tokens generated from the trained model at the end (0 = none)", ge=0)
    sample_prompt: str = knob("Once upon a time", "prompt of that sample")
    progress: Any = knob(
        "auto",
        "progress bar: auto (only on a terminal, and not for the jobs of a parallel sweep, whose sweep prints "
        "one line for all) | true | false",
        choices=("auto", True, False),
    )
    log_every: int = knob(
        50,
        "a progress line (step, loss, lr, grad norm, tokens/s, s/step, ETA) every this many steps and at the "
        "last, into train.log and, when no bar is drawn there, the console; 0 = none",
        ge=0,
    )


@dataclass(frozen=True)
class Option:
    """One option of a config group: the class that types and checks it, what --help says of it, and the
    values its ConfigStore node holds (the class's defaults with the option's own changes)."""

    config: type[Knobs]
    about: str
    changes: Mapping[str, Any] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        return {**self.config.defaults(), **self.changes}


def _about(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split())


# group → option → Option, in the order of configs/config.yaml's defaults list (the order --help shows)
GROUPS: dict[str, dict[str, Option]] = {
    "model": {name: Option(ModelConfig, about, changes) for name, (about, changes) in SIZES.items()},
    "norm": {
        **{name: Option(kind.config, _about(kind.config)) for name, kind in NORMS.items()},
        **{
            name: Option(NORMS[base].config, about, changes)
            for name, (base, about, changes) in RECIPES.items()
        },
    },
    "placement": {name: Option(p.config, p.about, {"name": name}) for name, p in PLACEMENTS.items()},
    "schedule": {name: Option(ScheduleConfig, about, {"name": name}) for name, about in SCHEDULES.items()},
    "optim": {"adamw": Option(OptimConfig, _about(OptimConfig))},
    "train": {"default": Option(TrainConfig, _about(TrainConfig))},
    "data": {name: Option(cls, _about(cls)) for name, cls in DATA.items()},
    "metrics": {"default": Option(InstrumentConfig, _about(InstrumentConfig))},
    "spikes": {"default": Option(SpikeConfig, _about(SpikeConfig))},
    "divergence": {"default": Option(DivergenceConfig, _about(DivergenceConfig))},
    "logger": {name: Option(cls, _about(cls)) for name, cls in LOGGERS.items()},
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


def config_class(group: str, values: Mapping[str, Any]) -> type[Knobs]:
    """The class that types and checks a composed group: the group's one class, or, where the options have
    classes of their own (norm, placement, data, logger), the one its `name` picks."""
    options = GROUPS[group]
    classes = {o.config for o in options.values()}
    if len(classes) == 1:
        return classes.pop()
    name, names = values.get("name"), names_taken(group)
    if name not in options or name not in names:  # norm.name=dyt_llama: an option, not a norm's name
        raise InvalidConfig(
            f"{group}.name={shown(name)} is not allowed; {group}.name takes one of {', '.join(names)}.",
            f"{group}.name",
        )
    return options[name].config


def names_taken(group: str) -> list[str]:
    """What `GROUP.name` takes: the names the classes of the group's options accept, in the options' order.
    Read here, where the options are listed, because a class need not know the others (a norm's config
    takes its own name only: model/norm_config.py)."""
    rules = [fields_of(o.config)["name"].metadata["rule"] for o in GROUPS[group].values()]
    return list(dict.fromkeys(c for rule in rules for c in choices(rule) or ()))


def settings() -> list[str]:
    """Every key a user can set (`depth`, `train.max_steps`, ...), for "did you mean"."""
    keys = [k for k in RootConfig.defaults()]
    for group, options in GROUPS.items():
        for option in options.values():
            keys += [f"{group}.{k}" for k in option.config.defaults() if not k.startswith("_")]
    return sorted(set(keys))
