"""Normalization layers, registered by the name users type (`norm=ln`).

Adding a norm type is one entry in NORMS: a factory `(d_model, spec, context_length) -> nn.Module`, and a
symbol for the block formula. `spec` is the resolved `norm` config group (a plain dict); context_length
is the longest sequence the model accepts (BatchNorm keeps statistics per position).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.configs import group_defaults


class _RMSNormCPU(torch.autograd.Function):
    """RMSNorm in float32 with few passes over memory, for the CPU, where torch has no fused backward.

    Autograd through F.rms_norm on the CPU differentiates its pow / mean / rsqrt / mul ops one by one: about
    6x LayerNorm's fused kernels, forward plus backward. Here the forward is one fused reduction
    (vector_norm) and two multiplies (torch's own `_fused_rms_norm` forward measured slower on the CPU),
    and the backward reuses LayerNorm's fused backward kernel with a zero mean: for xhat = x·rstd and g' = g·w that
    kernel returns rstd·(g' − mean(g') − xhat·mean(g'·xhat)) and Σ g·xhat, i.e. RMSNorm's gradients except
    for the −rstd·mean(g') that LayerNorm's mean-centering contributes, which is added back.
    """

    @staticmethod
    def forward(ctx, x, weight, eps):  # noqa: ANN001
        rstd = torch.linalg.vector_norm(x, 2, -1, keepdim=True).square_().div_(x.shape[-1]).add_(eps).rsqrt_()
        ctx.save_for_backward(x, rstd, weight)
        return torch.mul(x, rstd).mul_(weight)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
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

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least
        x32 = x if x.dtype == dtype else x.to(dtype)
        w32 = self.weight if self.weight.dtype == dtype else self.weight.to(dtype)
        if (x.device.type == "cpu" and not torch.compiler.is_compiling()) or not hasattr(F, "rms_norm"):
            y = _RMSNormCPU.apply(x32, w32, self.eps)
        else:
            y = F.rms_norm(x32, (x.shape[-1],), w32, self.eps)
        return y if y.dtype == x.dtype else y.to(x.dtype)


class CausalBatchNorm(nn.Module):
    """BatchNorm over the feature dimension with per-position statistics, in training and in eval.

    Training normalises position t with the mean and variance of position t over the batch axis only,
    never over time: pooling over time (as nn.BatchNorm1d on (B, C, T) does) would let position t see
    tokens after t. The running statistics are kept per position too, a (context_length, d_model)
    buffer each, so eval mode normalises every position with the statistics it was trained with;
    averaging them over positions would drop the spread between positions (the first positions of a
    window have quite different activations from the later ones) and evaluate a different network.
    Positions never seen in training (beyond train.seq_len) keep the initial (0, 1).

    Under torchrun each rank normalises with its own batch's statistics, as DistributedDataParallel leaves
    BatchNorm; with `sync` the per-position mean and variance are those of the global batch (all ranks,
    all-reduced in the forward and, through autograd, in the backward, as SyncBatchNorm does), so an
    N-rank run normalises exactly as a 1-rank run of the same global batch.
    """

    def __init__(
        self,
        d_model: int,
        context_length: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        bias: bool = True,
        sync: bool = False,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.momentum = momentum
        self.sync = sync
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None
        self.register_buffer("running_mean", torch.zeros(context_length, d_model))
        self.register_buffer("running_var", torch.ones(context_length, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, time, d_model)
        t = x.shape[1]
        if self.training:
            x32 = x.float()
            ranks = _sync_world_size() if self.sync else 1
            if ranks > 1:  # the global batch's statistics: equal batches on every rank, so means of means
                mean = _all_reduce_mean(x32.mean(0), ranks)
                var = _all_reduce_mean((x32 - mean).square().mean(0), ranks)
            else:
                mean = x32.mean(0)  # (T, C): per position, over the batch
                var = x32.var(0, unbiased=False)
            with torch.no_grad():
                n = x.shape[0] * ranks
                self.running_mean[:t].lerp_(mean, self.momentum)
                self.running_var[:t].lerp_(var * (n / max(n - 1, 1)), self.momentum)
            y = (x32 - mean) * torch.rsqrt(var + self.eps)
        else:
            y = (x.float() - self.running_mean[:t]) * torch.rsqrt(self.running_var[:t] + self.eps)
        y = y * self.weight.float()
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype)


def _sync_world_size() -> int:
    import torch.distributed as torch_dist

    if torch_dist.is_available() and torch_dist.is_initialized():
        return torch_dist.get_world_size()
    return 1


def _all_reduce_mean(t: torch.Tensor, ranks: int) -> torch.Tensor:
    """Mean over the ranks, differentiable (its backward all-reduces the gradient)."""
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(t) / ranks


@dataclass(frozen=True)
class NormType:
    """How to build one norm type, and what else it changes in the block.

    residual_scale(n_layers) multiplies the skip path before the add (1.0 = plain residual);
    init_gain(n_layers), when given, replaces `model.init` for the block's projections: Xavier-normal
    with that gain on the value, attention-output and both feed-forward weights and gain 1 on the query
    and key weights (DeepNet's recipe); placements restricts where the norm is defined (None = every
    placement). removes_batch_shift: in training the norm subtracts the batch mean of each position and
    feature, so adding one vector to every sequence of the batch leaves its output unchanged (BatchNorm);
    parameters that can only add such a vector are then held at their initial values
    (GPT.norm_cancelled_parameters says which, and why).
    """

    build: Callable[[int, Mapping[str, Any], int], nn.Module]
    symbol: str
    residual_scale: Callable[[int], float] = lambda n_layers: 1.0
    init_gain: Callable[[int], float] | None = None
    placements: tuple[str, ...] | None = None
    removes_batch_shift: bool = False


def _layer_norm(d: int, spec: Mapping[str, Any], context_length: int) -> nn.Module:
    return nn.LayerNorm(d, eps=spec["eps"], bias=spec["bias"])


NORMS: dict[str, NormType] = {
    "ln": NormType(_layer_norm, "LN"),
    "rms": NormType(lambda d, s, t: RMSNorm(d, eps=s["eps"]), "RMS"),
    "bn": NormType(
        lambda d, s, t: CausalBatchNorm(
            d,
            t,
            eps=s["eps"],
            momentum=s["momentum"],
            bias=s["bias"],
            sync=s["sync"],
        ),
        "BN",
        removes_batch_shift=True,
    ),
    # DeepNet (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"), decoder-only with N
    # blocks: x ← LN(α·x + F(x)) with α = (2N)^¼, and the paper's deepnorm_init (its Fig. 2 pseudo-code):
    # xavier_normal_(w, gain=β) on ffn, v_proj, out_proj and gain 1 on q_proj, k_proj, β = (8N)^-¼.
    # Defined for post only. Microsoft's torchscale (torchscale/architecture/decoder.py, read for this)
    # uses α = (2N)^¼ and init_scale = (8N)^¼ for decoder-only, but divides its default-initialised
    # v_proj / out_proj / fc1 / fc2 parameters by init_scale instead; we follow the paper's recipe.
    "deepnorm": NormType(
        _layer_norm,
        "LN",
        residual_scale=lambda n: (2 * n) ** 0.25,
        init_gain=lambda n: (8 * n) ** -0.25,
        placements=("post",),
    ),
    "none": NormType(lambda d, s, t: nn.Identity(), ""),
}


def build_norm(d_model: int, spec: Mapping[str, Any], context_length: int) -> nn.Module:
    """The norm named by spec["name"], for vectors of size d_model in sequences of up to context_length;
    settings the spec leaves out come from configs/norm/NAME.yaml (their one place)."""
    kind = NORMS[spec["name"]]  # an unknown name is caught before this, where the choices are listed
    return kind.build(d_model, {**group_defaults("norm", spec["name"]), **spec}, context_length)


QK_NORMS = ("none", "ln", "rms")


def build_qk_norm(kind: str, d_head: int) -> nn.Module:
    """The norm applied to each head's queries and keys (model.qk_norm): over d_head, one learned gain
    (and, for ln, bias) of size d_head shared by all heads."""
    if kind == "ln":
        return nn.LayerNorm(d_head, eps=1e-5)
    if kind == "rms":
        return RMSNorm(d_head, eps=1e-6)
    return nn.Identity()
