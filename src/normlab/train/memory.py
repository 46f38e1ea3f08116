"""Will the run fit in memory? Checked before anything is allocated, so a run that cannot fit is refused in one
sentence in milliseconds instead of dying in the allocator (or swapping for minutes) half-way through building.

The estimate is deliberately a *lower* bound — only what a training step cannot do without — so that it
never refuses a run that would fit:

- the model state: every parameter in float32 with its gradient and AdamW's two moments, 16 bytes each
  (the parameter count from the model config: embeddings, the untied head, per block 4·d² for attention and
  2·ffn_mult·d² for the feed-forward, biases and norm gains);
- the activations autograd keeps for the backward of one micro-batch: per token and block (8 + 2·ffn_mult)·d
  floats (the two norms' inputs and outputs, q, k, v, the attention output, the feed-forward's hidden
  pre-activation and activation), attention matrices and the logits left out (fused kernels avoid them);
- the token windows of one draw, on the host: their int64 start offsets and the int64 window tensor,
  (batch × ranks) × (seq_len + 1) × 16 bytes.

On a CPU everything counts against the host's available memory (MemAvailable, or the cgroup limit where
lower); on a GPU the model state and activations count against the device's free memory and the windows
against the host's. Where availability cannot be read the check is skipped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from normlab.config.groups import TrainConfig
from normlab.errors import InvalidConfig, UserError
from normlab.model.config import ModelConfig

GIB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    params: int  # parameter count
    model_state: int  # bytes: weights, gradients, AdamW moments
    activations: int  # bytes, one micro-batch
    windows: int  # bytes on the host, one draw of token windows

    @property
    def total(self) -> int:
        return self.model_state + self.activations + self.windows


def parameter_count(model: ModelConfig | Mapping[str, Any]) -> int:
    """The GPT's parameter count from its (resolved) config, without building it (within a few norm gains)."""
    model = ModelConfig.of(model)
    d, layers, vocab = int(model.d_model), int(model.n_layers), int(model.vocab_size)
    ffn = int(model.ffn_mult) * d
    bias = bool(model.bias)
    embeddings = vocab * d * (1 if model.tie_embeddings else 2)
    if model.pos == "learned":
        embeddings += int(model.context_length) * d
    block = 4 * d * d + 2 * ffn * d + 4 * d  # attention, feed-forward, two norms' gains and biases
    if bias:
        block += 4 * d + ffn + d
    return embeddings + layers * block + 2 * d


def embedding_share(model: ModelConfig | Mapping[str, Any]) -> float:
    """The share of the parameters in the token embedding (and the head, when untied)."""
    model = ModelConfig.of(model)
    embeddings = int(model.vocab_size) * int(model.d_model) * (1 if model.tie_embeddings else 2)
    return embeddings / max(parameter_count(model), 1)


def estimate(cfg: Mapping[str, Any], world_size: int = 1) -> MemoryEstimate:
    """The lower-bound estimate above for a checked config."""
    model, train = ModelConfig.of(cfg["model"]), TrainConfig.of(cfg["train"])
    params = parameter_count(model)
    d, layers = int(model.d_model), int(model.n_layers)
    ffn_mult = int(model.ffn_mult)
    batch, seq_len = int(train.batch_size), int(train.seq_len)
    float_bytes = 2 if train.precision in ("bf16", "fp16") else 4
    activations = batch * seq_len * layers * (8 + 2 * ffn_mult) * d * float_bytes
    windows = batch * world_size * (seq_len + 1) * 16
    return MemoryEstimate(params, 16 * params, activations, windows)


def host_available() -> int | None:
    """Bytes this process can still allocate on the host: MemAvailable, capped by a cgroup memory limit."""
    found = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:
                found.append(max(int(limit) - int(usage), 0))
        except (OSError, ValueError):
            continue
    if not found and hasattr(os, "sysconf"):
        with contextlib.suppress(OSError, ValueError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(found) if found else None


def device_available(device: torch.device) -> int | None:
    """Free bytes on a CUDA device; None elsewhere (the host's memory then counts)."""
    if device.type != "cuda":
        return None
    try:
        return int(torch.cuda.mem_get_info(device)[0])
    except Exception:  # no driver answer: skip the device check rather than fail the run on it
        return None


def count(n: float) -> str:
    """A parameter count as people say it: 137 K, 1.7 M, 4.22e+14."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}" if n < 1e3 * 1e12 else f"{n:.3g}"
    return f"{n:.0f}"


def size(n: float) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", GIB), ("MiB", 1024**2)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1024:.1f} KiB"


def refusal(
    cfg: Mapping[str, Any], est: MemoryEstimate, host: int | None, device: int | None
) -> InvalidConfig | None:
    """One sentence naming the key that makes the run too big, or None when it fits (or nothing is known)."""
    model_part = {"model": est.model_state, "activations": est.activations}
    if device is not None:  # a GPU: the model and activations there, the windows on the host
        checks = [(model_part, device, "the GPU"), ({"windows": est.windows}, host, "this machine")]
    else:
        checks = [({**model_part, "windows": est.windows}, host, "this machine")]
    labels = {
        "model": f"{count(est.params)} parameters with their gradients and AdamW state",
        "activations": "activations",
        "windows": "token windows",
    }
    for parts, available, where in checks:
        needed = sum(parts.values())
        if available is None or needed <= available:
            continue
        detail = ", ".join(f"{labels[k]} {size(v)}" for k, v in parts.items() if v)
        key, subject, fix = culprit(cfg, parts.get("model", 0), needed, available)
        return InvalidConfig(
            f"{subject} needs at least {size(needed)} of memory ({detail}) but {where} has "
            f"{size(available)} available; {fix}.",
            key,
        )
    return None


def culprit(cfg: Mapping[str, Any], model_state: int, needed: int, available: int) -> tuple[str, str, str]:
    """(key, subject, fix) of a refusal: the setting whose lowering can make the run fit. The model when its
    state alone does not fit, or is most of what is needed — then depth or d_model, whichever is further
    above the small preset (ModelConfig's defaults: 6 blocks of 128) relative to how the state grows with it
    (linearly in depth, with d² in width); else the activations: the context when train.seq_len follows
    model.context_length, the model again where even train.batch_size=1 would not fit (activations grow with
    depth and width too), else the batch."""
    model, train = cfg["model"], cfg["train"]
    batch, seq_len = train["batch_size"], train["seq_len"]
    if model_state > available or model_state * 2 >= needed:
        return _model_culprit(cfg)
    if int(seq_len) == int(model["context_length"]) and int(seq_len) > 4096:
        subject = (
            f"model.context_length={model['context_length']} (= train.seq_len, with train.batch_size={batch})"
        )
        fix = (
            "lower model.context_length and train.seq_len (which follows it by default), or train.batch_size"
        )
        return "model.context_length", subject, fix
    # what is needed beyond the model state shrinks with the batch: at train.batch_size=1 it is its 1/batch
    if model_state + (needed - model_state) / max(int(batch), 1) > available:
        return _model_culprit(cfg)  # a smaller batch alone cannot make it fit
    fix = "lower train.batch_size (raise train.grad_accum to keep the global batch) or train.seq_len"
    return "train.batch_size", f"train.batch_size={batch} (with train.seq_len={seq_len})", fix


def _model_culprit(cfg: Mapping[str, Any]) -> tuple[str, str, str]:
    model = cfg["model"]
    depth, d = int(model["n_layers"]), int(model["d_model"])
    if embedding_share(model) >= 0.5:  # the token embedding (and an untied head) hold most of it
        data_vocab = cfg.get("data", {}).get("vocab_size")
        key = "data.vocab_size" if model["vocab_size"] == data_vocab else "model.vocab_size"
        subject = f"{key}={model['vocab_size']} (with model.d_model={d})"
        return key, subject, f"lower {key} (the embedding is vocab_size × model.d_model) or model.d_model"
    if depth / 6 > (d / 128) ** 2:
        return "depth", f"depth={depth} (with model.d_model={d})", "lower depth or model.d_model"
    return "model.d_model", f"model.d_model={d} (with depth={depth})", "lower model.d_model or depth"


def check_fits(cfg: Mapping[str, Any], device: torch.device, world_size: int = 1, runs: int = 1) -> None:
    """Raise InvalidConfig (one sentence) when the run — or `runs` such runs stacked in one model
    (normlab.train.stacked) — cannot fit in the memory available now."""
    est = estimate(cfg, world_size)
    if runs > 1:
        est = MemoryEstimate(
            est.params * runs, est.model_state * runs, est.activations * runs, est.windows * runs
        )
    problem = refusal(cfg, est, host_available(), device_available(device))
    if problem is not None:
        if runs > 1:
            raise InvalidConfig(
                f"{runs} runs stacked in one model do not fit: {problem} Or stack fewer runs "
                "(hydra.launcher.max_stack).",
                problem.key,
            )
        raise problem


def stack_fits(cfg: Mapping[str, Any], device: torch.device) -> int:
    """How many runs of `cfg` fit in memory stacked in one model (at least 1: a run that does not fit alone
    is refused by its own check); None-free: where availability is unknown, as many as asked."""
    est = estimate(cfg)
    host, dev = host_available(), device_available(device)
    limits = []
    if dev is not None:
        limits.append(dev // max(est.model_state + est.activations, 1))
        if host is not None:
            limits.append(host // max(est.windows, 1))
    elif host is not None:
        limits.append(host // max(est.total, 1))
    return max(1, min(limits)) if limits else 1 << 30


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps, e.g. Hydra's InstantiationException) is an allocation failure."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError | torch.OutOfMemoryError):
            return True
        text = str(seen)
        if isinstance(seen, RuntimeError) and (
            "can't allocate memory" in text or "not enough memory" in text
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def out_of_memory_error(exc: BaseException) -> UserError:
    """The sentence for an allocation that failed although the estimate fit."""
    first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    return UserError(
        f"Ran out of memory ({first}); lower train.batch_size, train.seq_len or the model size "
        "(model.d_model, depth), or free memory used by other processes."
    )
