"""Normalization layers, registered by the name users type (`norm=ln`).

Adding a norm type is one entry in NORMS, with its config and module beside it in this file (BatchNorm, the
one norm with running state and a distributed mode, has its own module: model/batch_norm.py): its config (a
dataclass whose fields are the `norm.*` knobs, with their defaults and help text, and whose docstring
`--help` shows), a factory
`(d_model, spec, context_length) -> nn.Module`, and a symbol for the block formula. `spec` is the resolved
`norm` config group (a plain dict); context_length is the longest sequence the model accepts (BatchNorm
keeps statistics per position). Its paper's formula, written out by hand, goes in `NORM_REFS`
(tests/formulas.py), which every norm of NORMS must have.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from normlab.knobs import knob
from normlab.model.batch_norm import BatchNormConfig, CausalBatchNorm
from normlab.model.norm_config import NormConfig, norm_name

# Optional[...] instead of `X | None`: OmegaConf reads these annotations at run time.
# ruff: noqa: UP007, UP045


@dataclass(frozen=True)
class NoNormConfig(NormConfig):
    """No normalization (identity in every slot): the control."""

    name: str = norm_name("none")


@dataclass(frozen=True)
class LayerNormConfig(NormConfig):
    """LayerNorm: y = (x − mean) / sqrt(var + eps) · g + b"""

    name: str = norm_name("ln")
    eps: float = knob(1e-5, "added to the variance", gt=0)
    bias: bool = knob(True, "learnable bias b (false = gain only)")


@dataclass(frozen=True)
class RMSNormConfig(NormConfig):
    """RMSNorm: y = x / sqrt(mean(x²) + eps) · g, statistics in at least float32 (Zhang & Sennrich 2019)"""

    name: str = norm_name("rms")
    eps: float = knob(1e-6, "added to the mean square", gt=0)


@dataclass(frozen=True)
class DeepNormConfig(NormConfig):
    """DeepNorm (Wang et al. 2022): x ← Norm(α·x + F(x)), α = (2N)^¼ for N blocks; the block's projections
    Xavier-normal with gain β = (8N)^-¼ on value, output and feed-forward weights and gain 1 on query and
    key, whatever model.init says (embeddings keep model.init's rule). Norm is LayerNorm as in the paper, or
    the norm.base one. Defined for placement=post only."""

    name: str = norm_name("deepnorm")
    base: str = knob(
        "ln",
        "the norm: ln (the paper) or another, with that norm's own defaults for the knobs not set here "
        "(+norm.KEY=VALUE sets another knob of that norm)",
        choices=lambda: DEEPNORM_BASES,
    )
    eps: Optional[float] = knob(
        None,
        "the norm's eps (LayerNorm and RMSNorm: added to the variance; ScaleNorm: lower bound on ‖x‖); null = "
        "that norm's own default",
        gt=0,
    )
    bias: Optional[bool] = knob(
        None, "the norm's bias (LayerNorm, BatchNorm, DyT); null = that norm's own default"
    )

    @classmethod
    def extra_keys(cls, values: Mapping[str, Any]) -> type | None:
        """Keys of the base norm's config are accepted too: they reach that norm (`base_spec`)."""
        base = NORMS.get(str(values.get("base", cls.base)))
        return base.config if base is not None else None


@dataclass(frozen=True)
class DynamicTanhConfig(NormConfig):
    """Dynamic Tanh (Zhu et al. 2025, Transformers without Normalization): y = γ·tanh(α·x) + β, α one
    learnable scalar, γ and β per feature; no statistics (jiachenzhu/DyT, dynamic_tanh.py). For LLaMA the
    authors set α's init per slot and width (other_tasks/LLaMA: attention / FFN / final norm 0.8 / 0.2 / 0.2
    at 7B, 0.6 / 0.15 / 0.15 at 13B, 0.2 / 0.05 / 0.05 at 34B and 70B) and drop β: norm.alpha_attn,
    norm.alpha_ffn, norm.alpha_final and norm.bias=false."""

    name: str = norm_name("dyt")
    alpha_init: float = knob(
        0.5, "α at init (the paper's default 0.5, which its non-LLM experiments use)", gt=0
    )
    bias: bool = knob(True, "learnable bias β (false = γ·tanh(α·x), as the authors' LLaMA variant)")
    alpha_attn: Optional[float] = knob(
        None, "α at init in the attention branch's norms (null = alpha_init)", gt=0
    )
    alpha_ffn: Optional[float] = knob(
        None, "α at init in the feed-forward branch's norms (null = alpha_init)", gt=0
    )
    alpha_final: Optional[float] = knob(
        None, "α at init in the final norm before the head (null = alpha_init)", gt=0
    )


@dataclass(frozen=True)
class ScaleNormConfig(NormConfig):
    """ScaleNorm (Nguyen & Salazar 2019, Transformers without Tears): y = g · x / max(‖x‖, eps), one
    learnable scalar g initialised to √d_model (tnq177/transformers_without_tears, layers.py)."""

    name: str = norm_name("scalenorm")
    eps: float = knob(1e-5, "lower bound on ‖x‖ (a clamp, not an addition, as the authors' code)", gt=0)


class _RMSNormCPU(torch.autograd.Function):
    """RMSNorm in float32 with few passes over memory, for the CPU, where torch has no fused backward.

    Autograd through F.rms_norm on the CPU differentiates its pow / mean / rsqrt / mul ops one by one, several
    times LayerNorm's fused kernels, forward plus backward (docs/performance.md, "RMSNorm"). Here the forward is one fused reduction
    (vector_norm) and two multiplies (torch's own `_fused_rms_norm` forward measured slower on the CPU),
    and the backward reuses LayerNorm's fused backward kernel with a zero mean: for xhat = x·rstd and g' = g·w that
    kernel returns rstd·(g' − mean(g') − xhat·mean(g'·xhat)) and Σ g·xhat, i.e. RMSNorm's gradients except
    for the −rstd·mean(g') that LayerNorm's mean-centering contributes, which is added back.
    """

    generate_vmap_rule = True  # a stack of runs (normlab.train.stacked) runs it under torch.vmap

    @staticmethod
    def forward(x, weight, eps):  # noqa: ANN001, ANN205
        norm = torch.linalg.vector_norm(x, 2, -1, keepdim=True)
        rstd = norm.mul_(norm).div_(x.shape[-1]).add_(eps).rsqrt_()  # mul_, not square_: vmap has its rule
        return torch.mul(x, rstd).mul_(weight), rstd

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: ANN001, ANN205
        x, weight, _ = inputs
        ctx.save_for_backward(x, output[1], weight)
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad, _):  # noqa: ANN001
        x, rstd, weight = ctx.saved_tensors
        want_x, want_w = ctx.needs_input_grad[:2]
        d = x.shape[-1]
        grad = grad.contiguous()
        grad_x, grad_w, _ = torch.ops.aten.native_layer_norm_backward(
            grad, x.contiguous(), [d], torch.zeros_like(rstd), rstd, weight, None, [want_x, want_w, False]
        )
        if want_x:
            grad_x.add_((grad @ weight).unsqueeze_(-1).mul_(rstd), alpha=1.0 / d)
        return grad_x, grad_w, None


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · g, statistics in float32 whatever the input dtype (Zhang & Sennrich 2019).

    On the CPU (eager) through `_RMSNormCPU`; elsewhere, and under torch.compile, through torch's
    F.rms_norm, which is a fused kernel on GPUs and which Inductor fuses itself.
    """

    def __init__(self, d_model: int, eps: float = RMSNormConfig.eps) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least
        x32 = x if x.dtype == dtype else x.to(dtype)
        w32 = self.weight if self.weight.dtype == dtype else self.weight.to(dtype)
        if (x.device.type == "cpu" and not torch.compiler.is_compiling()) or not hasattr(F, "rms_norm"):
            y = _RMSNormCPU.apply(x32, w32, self.eps)[0]
        else:
            y = F.rms_norm(x32, (x.shape[-1],), w32, self.eps)
        return y if y.dtype == x.dtype else y.to(x.dtype)


class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025, *Transformers without Normalization*): y = γ·tanh(α·x) + β, with α one learnable
    scalar initialised to `alpha_init` and γ, β per feature (1 and 0 at init), as the authors' code has it
    (jiachenzhu/DyT, dynamic_tanh.py; its LLaMA variant drops β: `bias=False`). No statistic: an
    element-wise map that squashes large inputs as LayerNorm's S-shaped input-output curve does."""

    def __init__(
        self,
        d_model: int,
        alpha_init: float = DynamicTanhConfig.alpha_init,
        bias: bool = DynamicTanhConfig.bias,
    ) -> None:
        super().__init__()
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.alpha * x) * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, alpha_init={self.alpha_init}, bias={self.bias is not None}"


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, *Transformers without Tears*): y = g · x / max(‖x‖, eps), one
    learnable scalar g initialised to √d, so that the output has unit RMS at init. The norm is clamped below
    at eps rather than eps added, as the authors' code does (tnq177/transformers_without_tears, layers.py,
    eps 1e-5); computed in at least float32 (float64 input stays float64), as RMSNorm's statistics are."""

    def __init__(self, d_model: int, eps: float = ScaleNormConfig.eps) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d_model)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least
        x32 = x.to(dtype)
        norm = torch.linalg.vector_norm(x32, 2, -1, keepdim=True).clamp(min=self.eps)
        return (x32 * (self.scale.to(dtype) / norm)).to(x.dtype)


@dataclass(frozen=True)
class NormType:
    """How to build one norm type, and what else it changes in the block.

    `config` is its config dataclass (the `norm.*` knobs it has, their defaults and help text). `symbol` names it in the block formula (a function of the spec where it depends on it: DeepNorm shows
    its base norm). residual_scale(n_layers) multiplies the skip path before the add (1.0 = plain
    residual); init_gain(n_layers), when given, replaces `model.init` for the block's projections:
    Xavier-normal with that gain on the value, attention-output and both feed-forward weights and gain 1 on
    the query and key weights (DeepNet's recipe); placements restricts where the norm is defined (None =
    every placement); `qk` says whether it can normalise each head's queries and keys (`model.qk_norm`): a
    norm of one vector at a time that changes nothing else in the block.
    """

    config: type[NormConfig]
    build: Callable[[int, Mapping[str, Any], int], nn.Module]
    symbol: str | Callable[[Mapping[str, Any]], str]
    residual_scale: Callable[[int], float] = lambda n_layers: 1.0
    init_gain: Callable[[int], float] | None = None
    placements: tuple[str, ...] | None = None
    qk: bool = True


def _layer_norm(d: int, spec: Mapping[str, Any], context_length: int) -> nn.Module:
    return nn.LayerNorm(d, eps=spec["eps"], bias=spec["bias"])


def _deepnorm_base(d: int, spec: Mapping[str, Any], context_length: int) -> nn.Module:
    """DeepNorm's norm: the norm named by norm.base, with the settings the deepnorm group gives (eps, bias)
    where that norm has them and its own defaults for the rest."""
    return build_norm(d, base_spec(spec), context_length)


def base_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec of the norm DeepNorm wraps (`norm.base`): the deepnorm group's settings where that norm has
    them and they are set (not null), that norm's own defaults for the rest."""
    base = spec["base"]
    own = NORMS[base].config.defaults()
    chosen = {k: v for k, v in spec.items() if k in own and k != "name" and v is not None}  # null: its own
    return {**own, **chosen, "name": base}


def built_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`spec` as the norm is built from it: DeepNorm's eps and bias as its base norm takes them (null: the
    base's own; dropped where the base has no such knob). Two specs that build the same norm compare equal —
    a checkpoint that recorded eps=1e-5 before null meant "the base's own" resumes as the same model."""
    if spec.get("name") != "deepnorm" or spec.get("base") not in NORMS:
        return dict(spec)
    base = base_spec(spec)
    rest = {k: v for k, v in spec.items() if k not in ("eps", "bias")}
    return {**rest, **{k: base[k] for k in ("eps", "bias") if k in base}}


NORMS: dict[str, NormType] = {
    "ln": NormType(LayerNormConfig, _layer_norm, "LN"),
    "rms": NormType(RMSNormConfig, lambda d, s, t: RMSNorm(d, eps=s["eps"]), "RMS"),
    "bn": NormType(
        BatchNormConfig,
        lambda d, s, t: CausalBatchNorm(
            d,
            t,
            eps=s["eps"],
            momentum=s["momentum"],
            bias=s["bias"],
            sync=s["sync"],
            stats=s["stats"],
        ),
        "BN",
        qk=False,  # statistics over the batch, per position: not a per-vector norm of q and k
    ),
    # DeepNet (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), decoder-only with N
    # blocks: x ← Norm(α·x + F(x)) with α = (2N)^¼, and the paper's deepnorm_init (its Fig. 2 pseudo-code):
    # xavier_normal_(w, gain=β) on ffn, v_proj, out_proj and gain 1 on q_proj, k_proj, β = (8N)^-¼.
    # Norm is LayerNorm as in the paper, or another norm through norm.base. Defined for post only. Microsoft's
    # torchscale (torchscale/architecture/decoder.py, read for this) uses α = (2N)^¼ and init_scale =
    # (8N)^¼ for decoder-only, but divides its default-initialised v_proj / out_proj / fc1 / fc2 parameters
    # by init_scale instead; we follow the paper's recipe.
    "deepnorm": NormType(
        DeepNormConfig,
        _deepnorm_base,
        lambda spec: norm_symbol(base_spec(spec)),
        residual_scale=lambda n: (2 * n) ** 0.25,
        init_gain=lambda n: (8 * n) ** -0.25,
        placements=("post",),
        qk=False,  # its residual scale and init belong to the block, not to q and k
    ),
    "none": NormType(NoNormConfig, lambda d, s, t: nn.Identity(), ""),
    "dyt": NormType(
        DynamicTanhConfig, lambda d, s, t: DynamicTanh(d, alpha_init=s["alpha_init"], bias=s["bias"]), "DyT"
    ),
    "scalenorm": NormType(ScaleNormConfig, lambda d, s, t: ScaleNorm(d, eps=s["eps"]), "SN"),
}
# norm=NAME options that are a norm of NORMS with a paper's settings: name → (norm, what --help says, the
# settings). The runs record the norm's own name (norm.name), with these values.
RECIPES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "dyt_llama": (
        "dyt",
        "DyT as the authors' LLaMA runs set it (jiachenzhu/DyT, other_tasks/LLaMA, 7B): no β, α at init 0.8 "
        "in the attention branch's norms and 0.2 in the feed-forward branch's and the final norm",
        {"bias": False, "alpha_attn": 0.8, "alpha_ffn": 0.2, "alpha_final": 0.2},
    ),
}
# what norm.base may name: a norm, not DeepNorm itself and not none (α·x + F(x) unnormalised grows
# without bound)
DEEPNORM_BASES = tuple(name for name in NORMS if name not in ("deepnorm", "none"))


def norm_spec(spec: Mapping[str, Any] | str) -> dict[str, Any]:
    """A norm spec with every setting: a name alone (`"rms"`) or a partial spec, completed from the norm's
    config defaults (their one place). The name must be in NORMS (checked before, where the choices are
    listed)."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    return {**NORMS[spec["name"]].config.defaults(), **spec}


SLOTS = (
    "attn",
    "ffn",
    "final",
)  # the kinds of norm slot: the attention branch's, the FFN branch's, the final


def slot_spec(spec: Mapping[str, Any] | str, slot: str) -> dict[str, Any]:
    """The norm spec for one kind of slot (SLOTS): the same everywhere, except DyT's α at init, which the
    authors' LLaMA recipe sets per slot (norm.alpha_attn / alpha_ffn / alpha_final; null = alpha_init). A
    DeepNorm over DyT passes them on to its base norm."""
    if slot not in SLOTS:
        raise ValueError(f"slot {slot!r} is not one of {', '.join(SLOTS)}")
    spec = norm_spec(spec)
    per_slot = spec.get(f"alpha_{slot}")
    return {**spec, "alpha_init": per_slot} if per_slot is not None else spec


def norm_symbol(spec: Mapping[str, Any] | str) -> str:
    """The norm's name in a block formula (`LN`, `RMS`, ``: none)."""
    spec = norm_spec(spec)
    symbol = NORMS[spec["name"]].symbol
    return symbol if isinstance(symbol, str) else symbol(spec)


def build_norm(d_model: int, spec: Mapping[str, Any] | str, context_length: int) -> nn.Module:
    """The norm named by spec["name"], for vectors of size d_model in sequences of up to context_length;
    settings the spec leaves out take the norm's config defaults (their one place)."""
    spec = norm_spec(spec)
    return NORMS[spec["name"]].build(d_model, spec, context_length)


def qk_norms() -> tuple[str, ...]:
    """What model.qk_norm may name: none, then every norm of NORMS that normalises one vector at a time."""
    return ("none", *(name for name, kind in NORMS.items() if kind.qk and name != "none"))


def build_qk_norm(name: str, d_head: int) -> nn.Module:
    """The norm applied to each head's queries and keys (model.qk_norm): NORMS[name] over d_head with its
    defaults, one set of learned parameters of size d_head shared by all heads."""
    return build_norm(d_head, name, context_length=0)
