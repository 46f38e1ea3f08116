"""The LM head and its loss in one pass over the vocabulary, chunk by chunk, gradient included: the CPU's
fast path behind `normlab.train.head_loss.HeadLoss`.

The plain way — `logits = head(h)`, then `F.cross_entropy(logits, y)` — writes the (tokens × vocabulary)
logits, their log-softmax, a zero-filled gradient for the NLL and the log-softmax gradient, each a fresh
tensor (64 MiB apiece at batch 32 × 128 tokens × 4096 words), and reads them back: on a CPU that memory
traffic costs more than the head's matrix products themselves. Here the logits of a chunk of rows live
in one reused buffer that stays in cache while the loss and the gradient with respect to the logits,
softmax − one-hot, are computed from it; the gradients of the hidden states and of the head weight are
accumulated right away (two matrix products per chunk, the same FLOPs as autograd's), and the backward
only scales them by the incoming gradient.

Same mathematics as `F.cross_entropy` on the full logits (float32 throughout), so results agree to float
rounding, not bit for bit: the sums run in a different order. The optional z-loss term (Chowdhery et al.
2022) is folded in: objective = CE + c · mean(log Z)², whose gradient adds 2c · log Z · softmax.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from normlab.metrics.activations import LogitStats

# logits per chunk: 16 MiB of float32 (1024 rows of a 4096-word vocabulary), within the L3 cache; with two
# threads on a busy machine every parallel op of a chunk waits for the slower thread, so fewer, larger
# chunks lose less (the measurements: docs/performance.md, "The chunk size of the fused head").
CHUNK_ELEMENTS = 1 << 22


def chunk_rows(vocab_size: int, n_rows: int) -> int:
    return max(1, min(n_rows, CHUNK_ELEMENTS // vocab_size))


class _FusedHeadLoss(torch.autograd.Function):
    """The chunked pass for every member of a stack at once: hidden (members, n, d), weight (members, vocab,
    d), targets (members, n); a run alone is a stack of one (bit for bit the same arithmetic: a batched
    matrix product of one matrix is that matrix product). `z_over_n` (members,) and `z2` (members, 1, 1) are
    each member's z-loss coefficient over n and doubled, float32, None where no member has one."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, z_over_n, z2, want_hidden_grad, want_weight_grad):  # noqa: ANN001
        s, n, vocab = hidden.shape[0], hidden.shape[1], weight.shape[1]
        rows = chunk_rows(vocab, n)
        buffer = hidden.new_empty(s, rows, vocab)
        ce_sum = hidden.new_zeros(s)
        z_sum = hidden.new_zeros(s)
        log_z_sum = hidden.new_zeros(s)
        max_logit = hidden.new_full((s,), float("-inf"))
        grad_hidden = torch.empty_like(hidden) if want_hidden_grad else None
        grad_weight = torch.zeros_like(weight) if want_weight_grad else None
        minus_one = hidden.new_full((s, rows, 1), -1.0)
        weight_t = weight.transpose(1, 2)
        for start in range(0, n, rows):
            h, t = hidden[:, start : start + rows], targets[:, start : start + rows, None]
            r = h.shape[1]
            logits = torch.bmm(h, weight_t, out=buffer[:, :r]) if r == rows else torch.bmm(h, weight_t)
            row_max = logits.amax(2, keepdim=True)
            target_logit = logits.gather(2, t)
            exp = logits.sub_(row_max).exp_()  # in place: the buffer now holds exp(logit − max)
            sums = exp.sum(2, keepdim=True)
            log_z = sums.log().add_(row_max)
            ce_sum += (log_z - target_logit).sum((1, 2))
            log_z_sum += log_z.sum((1, 2))
            max_logit = torch.maximum(max_logit, row_max.amax((1, 2)))
            if z2 is not None:
                z_sum += log_z.square().sum((1, 2))
            if grad_hidden is None and grad_weight is None:
                continue
            # d objective / d logits (per row, before the 1/n of the mean): softmax · (1 + 2c·log Z) − one-hot
            # (a member without z-loss: (log Z · 0 + 1) / sums, the same number as 1 / sums)
            scale = (log_z * z2 + 1).div_(sums) if z2 is not None else sums.reciprocal_()
            grad_logits = exp.mul_(scale)
            grad_logits.scatter_add_(2, t, minus_one[:, :r])
            if grad_hidden is not None:
                grad_hidden[:, start : start + rows] = torch.bmm(grad_logits, weight)
            if grad_weight is not None:
                grad_weight.baddbmm_(grad_logits.transpose(1, 2), h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.n = n
        ce = ce_sum / n
        objective = ce + z_sum * z_over_n if z2 is not None else ce.clone()
        mean_log_z = log_z_sum / n
        ctx.mark_non_differentiable(ce, max_logit, mean_log_z)
        return objective, ce, max_logit, mean_log_z

    @staticmethod
    def backward(ctx, grad_objective, *grad_measurements):  # noqa: ANN001, ARG004
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = (grad_objective / ctx.n).view(-1, 1, 1)
        return (
            grad_hidden * scale if grad_hidden is not None else None,
            grad_weight * scale if grad_weight is not None else None,
            None,
            None,
            None,
            None,
            None,
        )


def fused_objective(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    z_loss: float = 0.0,
    *,
    stats: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, LogitStats | None]:
    """(objective to differentiate, cross-entropy, the logits' statistics or None) of logits = hidden @ weightᵀ
    against `targets`, the logits never materialised.

    hidden (..., d) float32, weight (vocab, d) float32 (the head's, tied or not), targets (...) int64.
    The cross-entropy is the mean over positions, in nats; the objective adds z_loss · mean(log Z)².
    Gradients are computed in the forward only when autograd will ask for them. With `stats` the logits'
    max, mean and mean log-normaliser come along (instrumented steps); the mean needs no pass over the
    logits: mean_{n,v} h_n·w_v = (mean_n h_n)·(mean_v w_v).
    """
    objective, ce, table = stacked_fused_objective(
        hidden.unsqueeze(0), weight.unsqueeze(0), targets.unsqueeze(0), [z_loss], stats=stats
    )
    if table is None:
        return objective[0], ce[0], None
    return objective[0], ce[0], LogitStats(max=table[0, 0], mean=table[0, 1], mean_log_z=table[0, 2])


def stacked_fused_objective(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    z_loss: Sequence[float],
    *,
    stats: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """`fused_objective` for every member of a stack in one pass: (objective, cross-entropy) per member, and
    with `stats` a (members, 3) table of the logits' max, mean and mean log-normaliser.

    hidden (members, ..., d), weight (members, vocab, d), targets (members, ...) or (...) shared by every
    member (evaluation's windows), z_loss each member's coefficient (Python floats: the coefficients' tensors
    are made here on the device without reading a tensor back, so a steady step makes no host read). No Python runs per member: the chunks' matrix products are batched over the stack; each
    member's numbers are its run alone's."""
    s, d = hidden.shape[0], hidden.shape[-1]
    flat = hidden.reshape(s, -1, d)
    if targets.dim() == hidden.dim() - 2:  # one batch for every member
        targets = targets.unsqueeze(0).expand(s, *targets.shape)
    coefficients = [float(z) for z in z_loss]
    any_z = any(z != 0.0 for z in coefficients)
    n = flat.shape[1]
    # float64 arithmetic in Python, then rounded to float32 on the device: the numbers the float64 tensors gave
    z_over_n = (
        torch.tensor([z / n for z in coefficients], dtype=torch.float32, device=flat.device)
        if any_z
        else None
    )
    z2 = (
        torch.tensor([2.0 * z for z in coefficients], dtype=torch.float32, device=flat.device).view(-1, 1, 1)
        if any_z
        else None
    )
    grad = torch.is_grad_enabled()
    objective, ce, max_logit, mean_log_z = _FusedHeadLoss.apply(
        flat,
        weight,
        targets.reshape(s, -1),
        z_over_n,
        z2,
        grad and flat.requires_grad,
        grad and weight.requires_grad,
    )
    if not stats:
        return objective, ce, None
    with torch.no_grad():
        h_mean, w_mean = flat.detach().mean(1), weight.detach().mean(1)
        # a run alone's dot product, the same number its head has always logged; a stack's in one batched call
        mean = (h_mean[0] @ w_mean[0]).view(1) if s == 1 else torch.linalg.vecdot(h_mean, w_mean)
        table = torch.stack([max_logit, mean, mean_log_z], dim=1)
    return objective, ce, table
