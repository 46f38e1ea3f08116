"""Every metric name written to metrics.jsonl (and W&B), defined once.

docs/metrics.md documents each of these; scripts and notebooks should import the names
from here rather than spelling the strings.
"""

STEP = "step"  # optimizer steps taken before this row was measured (0 = first batch, before any update)
LOSS = "loss"  # training cross-entropy (nats/token) of this step's batch, mean over grad_accum micro-batches
LR = "lr"  # learning rate used for this step's update
GRAD_NORM = "grad_norm"  # global L2 norm of all gradients, before clipping
CLIPPED = "clipped"  # 1 if gradient clipping scaled this step's gradients, else 0
TOKENS_PER_S = "tokens_per_s"  # training tokens per second of wall time, over the train.flush_every steps flushed with this row
MFU = "mfu"  # model FLOPs utilisation of that window: tokens_per_s × FLOPs per token ÷ peak (train.flops)
VAL_LOSS = "val_loss"  # validation cross-entropy (nats/token), on evaluation rows only
VAL_PPL = "val_ppl"  # exp(val_loss), on evaluation rows only

# Per-layer and per-sublayer names take the block index i (0 = closest to the embedding).
SUBLAYERS = ("attn", "ffn", "norm")


def grad_norm_layer(i: int) -> str:
    """L2 norm of the gradients of every parameter of block i, before clipping."""
    return f"grad_norm/layer_{i}"


def grad_norm_sublayer(i: int, part: str) -> str:
    """L2 norm of the gradients of one part (attn, ffn or norm) of block i, before clipping."""
    return f"grad_norm/layer_{i}/{part}"


PARAM_NORM = "param_norm"  # L2 norm of all trainable parameters (before this step's update)
UPDATE_RATIO = "update_ratio"  # ‖Δθ‖ / ‖θ‖ of all trainable parameters over this step's update


def param_norm_layer(i: int) -> str:
    """L2 norm of all parameters of block i (before this step's update)."""
    return f"param_norm/layer_{i}"


def update_ratio_layer(i: int) -> str:
    """‖Δθ‖ / ‖θ‖ of block i's parameters over one optimizer step."""
    return f"update_ratio/layer_{i}"


def act_rms_layer(i: int) -> str:
    """Root mean square of the residual stream leaving block i, over batch, positions and features."""
    return f"act_rms/layer_{i}"


def layer_ablation(i: int) -> str:
    """Validation loss (nats/token) with block i skipped — the identity in its place, the stream entering it
    passed to block i + 1 — over the same batches as val_loss; on evaluation rows, with
    metrics.layer_ablation (normlab.metrics.ablation)."""
    return f"layer_ablation/layer_{i}"


ACT_RMS_HEAD = "act_rms/head_input"  # RMS of the input to the LM head (after the final norm, if any)


def attn_max_logit_layer(i: int) -> str:
    """Largest attention logit q·k/√d_head in block i over batch, heads and the causal (query ≥ key) pairs,
    before the softmax."""
    return f"attn_max_logit/layer_{i}"


LOGIT_MEAN = "logits/mean"  # mean output logit over batch, positions and vocabulary
LOGIT_MAX = "logits/max"  # largest output logit over batch, positions and vocabulary
LOGIT_LOG_Z = (
    "logits/log_z"  # mean over positions of log Σ_v exp(logit_v), the output softmax's log-normaliser
)
EMBED_EFFECTIVE_RANK = "embed/effective_rank"  # exp(entropy of the L1-normalised singular values) of the token embedding (Roy & Vetterli 2007)
MODEL_UPDATE = (
    "model_update"  # ‖F(x, θ_t) − F(x, θ_0)‖ on a fixed probe batch (DeepNet's measure; metrics.model_update)
)
RESUME_CHANGED = "resume/changed"  # 1 on the first row after a resume that changed settings on purpose (train.resume_allow; summary.json resume_changes says which); absent otherwise
RESUME_GAP = "resume/gap"  # 1 on the first row after a resume across steps without rows (train.resume_allow=[missing_rows]; summary.json missing_steps); absent otherwise
SPIKE_LOSS = "spike/loss"  # 1 on a step whose loss is a spike (see metrics.spikes); absent otherwise
SPIKE_GRAD_NORM = "spike/grad_norm"  # 1 on a step whose grad norm is a spike; absent otherwise

# The series the spike detector watches, by the name used in spike events and forensics files.
SPIKE_SERIES = {LOSS: SPIKE_LOSS, GRAD_NORM: SPIKE_GRAD_NORM}


def grad_hist_layer(i: int) -> str:
    """Histogram of block i's gradient entries, before clipping (W&B only, not in metrics.jsonl)."""
    return f"grad_hist/layer_{i}"
