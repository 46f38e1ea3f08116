"""BatchNorm in a causal language model: its `norm.*` knobs and the module (`norm=bn` in NORMS).

Its own module because it is the one norm with state beyond its parameters (running statistics per
position), choices of what the statistics pool over and a distributed mode — none of which the per-vector
norms in norms.py have.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from normlab.knobs import knob
from normlab.model.norm_config import NormConfig, norm_name


@dataclass(frozen=True)
class BatchNormConfig(NormConfig):
    """BatchNorm over features with per-position batch statistics (never pooled over time, so it stays
    causal); eval mode uses per-position running statistics, a (model.context_length, d_model) buffer."""

    name: str = norm_name("bn")
    eps: float = knob(1e-5, "added to the variance", gt=0)
    momentum: float = knob(
        0.1, "weight of the newest batch in each position's running mean / variance", ge=0, le=1
    )
    bias: bool = knob(True, "learnable bias")
    stats: str = knob(
        "position",
        "what one mean and variance is taken over in training: position (each position over the batch: "
        "causal) | batch_seq (batch and sequence pooled, as Shen et al. 2020's BatchNorm in Transformers; in "
        "a causal LM a position's statistics then include later tokens of its window, which evaluation, "
        "with running statistics, does not have: compare eval-mode losses)",
        choices=("position", "batch_seq"),
    )
    sync: bool = knob(
        False,
        "under torchrun: normalise with the global batch's statistics (all ranks, all-reduced per position, as "
        "SyncBatchNorm); false = each rank's own batch, as DistributedDataParallel leaves BatchNorm. Part of "
        "the BN comparison: with false, an N-rank run's BN sees batch_size sequences, not the global batch",
    )


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

    With `stats="batch_seq"` one mean and variance per feature are taken over the batch and the positions
    together, as Shen et al. 2020 (PowerNorm) describe BatchNorm in Transformers; the running statistics are
    then the same for every position. That pooling is not causal in training (a position's statistics
    include the later tokens of its window); evaluation uses the running statistics and stays causal.
    """

    # In training the output does not change when one vector is added to every sequence of the batch (the
    # batch mean subtracts it): GPT.norm_cancelled_parameters holds what can only add such a vector.
    removes_batch_shift = True

    def __init__(
        self,
        d_model: int,
        context_length: int,
        eps: float = BatchNormConfig.eps,
        momentum: float = BatchNormConfig.momentum,
        bias: bool = BatchNormConfig.bias,
        sync: bool = BatchNormConfig.sync,
        stats: str = BatchNormConfig.stats,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.momentum = momentum
        self.sync = sync
        self.pooled = stats == "batch_seq"
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None
        self.register_buffer("running_mean", torch.zeros(context_length, d_model))
        self.register_buffer("running_var", torch.ones(context_length, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, time, d_model)
        t = x.shape[1]
        dtype = torch.promote_types(x.dtype, torch.float32)  # float32 at least, as RMSNorm
        if self.training:
            x32 = x.to(dtype)
            ranks = _sync_world_size() if self.sync else 1
            dims = (
                (0, 1) if self.pooled else (0,)
            )  # (C,) pooled over batch and time, else (T, C) per position
            if ranks > 1:  # the global batch's statistics: equal batches on every rank, so means of means
                mean = _all_reduce_mean(x32.mean(dims), ranks)
                var = _all_reduce_mean((x32 - mean).square().mean(dims), ranks)
            else:
                mean = x32.mean(dims)
                var = x32.var(dims, unbiased=False)
            with torch.no_grad():
                n = x.shape[0] * ranks * (t if self.pooled else 1)
                rows = slice(None) if self.pooled else slice(0, t)  # pooled: one statistic for every position
                # lerp, then copy_: the same values as an in-place lerp_, which has no rule for torch.vmap
                # (a stack of runs, normlab.train.stacked, updates its members' statistics under it)
                mean_now, var_now = self.running_mean[rows], self.running_var[rows]
                # the buffers' dtype: float64 input's statistics are rounded to it
                stat_dtype = mean_now.dtype
                mean_now.copy_(torch.lerp(mean_now, mean.to(stat_dtype).expand_as(mean_now), self.momentum))
                var_now.copy_(
                    torch.lerp(
                        var_now, (var * (n / max(n - 1, 1))).to(stat_dtype).expand_as(var_now), self.momentum
                    )
                )
            y = (x32 - mean) * torch.rsqrt(var + self.eps)
        else:
            mean, var = self.running_mean[:t].to(dtype), self.running_var[:t].to(dtype)
            y = (x.to(dtype) - mean) * torch.rsqrt(var + self.eps)
        y = y * self.weight.to(dtype)
        if self.bias is not None:
            y = y + self.bias.to(dtype)
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
