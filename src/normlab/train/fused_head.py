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

import torch

from normlab.metrics.activations import LogitStats

# logits per chunk: 16 MiB of float32 (1024 rows of a 4096-word vocabulary), within the L3 cache; with two
# threads on a busy machine every parallel op of a chunk waits for the slower thread, so fewer, larger
# chunks lose less (the measurements: docs/performance.md, "The chunk size of the fused head").
CHUNK_ELEMENTS = 1 << 22


def chunk_rows(vocab_size: int, n_rows: int) -> int:
    return max(1, min(n_rows, CHUNK_ELEMENTS // vocab_size))


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, z_loss, want_hidden_grad, want_weight_grad):  # noqa: ANN001
        n, vocab = hidden.shape[0], weight.shape[0]
        rows = chunk_rows(vocab, n)
        buffer = hidden.new_empty(rows, vocab)
        ce_sum = hidden.new_zeros(())
        z_sum = hidden.new_zeros(())
        log_z_sum = hidden.new_zeros(())
        max_logit = hidden.new_full((), float("-inf"))
        grad_hidden = torch.empty_like(hidden) if want_hidden_grad else None
        grad_weight = torch.zeros_like(weight) if want_weight_grad else None
        minus_one = hidden.new_full((rows, 1), -1.0)
        for start in range(0, n, rows):
            h, t = hidden[start : start + rows], targets[start : start + rows, None]
            logits = torch.mm(h, weight.t(), out=buffer[: len(h)])
            row_max = logits.amax(1, keepdim=True)
            target_logit = logits.gather(1, t)
            exp = logits.sub_(row_max).exp_()  # in place: the buffer now holds exp(logit − max)
            sums = exp.sum(1, keepdim=True)
            log_z = sums.log().add_(row_max)
            ce_sum += (log_z - target_logit).sum()
            log_z_sum += log_z.sum()
            max_logit = torch.maximum(max_logit, row_max.max())
            if z_loss:
                z_sum += log_z.square().sum()
            if grad_hidden is None and grad_weight is None:
                continue
            # d objective / d logits (per row, before the 1/n of the mean): softmax · (1 + 2c·log Z) − one-hot
            scale = (log_z * (2 * z_loss) + 1).div_(sums) if z_loss else sums.reciprocal_()
            grad_logits = exp.mul_(scale)
            grad_logits.scatter_add_(1, t, minus_one[: len(h)])
            if grad_hidden is not None:
                torch.mm(grad_logits, weight, out=grad_hidden[start : start + rows])
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.t(), h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.n = n
        ce = ce_sum / n
        objective = ce + z_sum * (z_loss / n) if z_loss else ce.clone()
        mean_log_z = log_z_sum / n
        ctx.mark_non_differentiable(ce, max_logit, mean_log_z)
        return objective, ce, max_logit, mean_log_z

    @staticmethod
    def backward(ctx, grad_objective, *grad_measurements):  # noqa: ANN001, ARG004
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_objective / ctx.n
        return (
            grad_hidden * scale if grad_hidden is not None else None,
            grad_weight * scale if grad_weight is not None else None,
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
    objective, ce, max_logit, mean_log_z = _apply(hidden, weight, targets, z_loss)
    if not stats:
        return objective, ce, None
    with torch.no_grad():
        d = hidden.shape[-1]
        mean = hidden.detach().reshape(-1, d).mean(0) @ weight.detach().mean(0)
    return objective, ce, LogitStats(max=max_logit, mean=mean, mean_log_z=mean_log_z)


def _apply(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, z_loss: float
) -> tuple[torch.Tensor, ...]:
    flat = hidden.reshape(-1, hidden.shape[-1])
    grad = torch.is_grad_enabled()
    return _FusedHeadLoss.apply(
        flat,
        weight,
        targets.reshape(-1),
        float(z_loss),
        grad and flat.requires_grad,
        grad and weight.requires_grad,
    )
