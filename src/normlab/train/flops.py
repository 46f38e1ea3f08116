"""Model FLOPs utilisation (MFU): the share of the device's peak that the model's own arithmetic uses.

    mfu = flops_per_token × tokens_per_s ÷ peak FLOP/s

FLOPs per token of a training step (forward + backward), as in Chowdhery et al. 2022 (PaLM), appendix B,
and Kaplan et al. 2020, §2.1:

    6·N + 12·L·T·d

- 6·N: each weight that takes part in a matrix product costs 2 FLOPs per token forward and 4 backward. N
  counts every parameter but the position embeddings and an untied token embedding, whose lookup is no
  product (a tied embedding counts once, as the head); norm gains and biases are counted too, a rounding
  error at any size.
- 12·L·T·d: the attention scores and their weighted sum (2·T·d each per token and block, forward),
  ×3 for the backward, for L blocks, context T (the training sequence length) and width d. The causal mask
  halves the useful part; like PaLM we count the full T, which is what dense attention kernels compute.
Norms, activations, softmax and the optimizer are left out (a few % at these sizes): MFU counts the
model's matrix arithmetic, not everything the step does.

Peak FLOP/s: dense (no structured sparsity) tensor-core numbers from the vendors' data sheets, for the
precision the run computes in; `train.peak_flops` overrides them (any device, the CPU included, for which
nothing is looked up).
"""

from __future__ import annotations

import re

import torch
from torch import nn

# Dense peak FLOP/s by (device-name fragment, precision). bf16/fp16: tensor cores; fp32: TF32 tensor
# cores, which normlab enables on CUDA (train.run). NVIDIA data sheets: A100 (SXM/PCIe, 2020),
# H100 (SXM, PCIe and NVL, 2023), H200 (2024), L4, L40 and L40S (2023).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},
    "H100 NVL": {"bf16": 835e12, "fp16": 835e12, "fp32": 417e12},
    "H100 PCIe": {"bf16": 756e12, "fp16": 756e12, "fp32": 378e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 494e12},  # SXM; also "H100 80GB HBM3"
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 156e12},
    "L40S": {"bf16": 362e12, "fp16": 362e12, "fp32": 183e12},
    "L40": {"bf16": 181e12, "fp16": 181e12, "fp32": 90e12},
    "L4": {"bf16": 121e12, "fp16": 121e12, "fp32": 60e12},
}


def matmul_params(model: nn.Module) -> int:
    """N of 6·N: every parameter except position embeddings and an untied token embedding."""
    seen: set[int] = set()
    n = 0
    tok = getattr(model, "tok_emb", None)
    head = getattr(model, "head", None)
    tied = tok is not None and head is not None and head.weight is tok.weight
    skip = {id(getattr(model, "pos_emb", None))}
    if tok is not None and not tied:
        skip.add(id(tok.weight))
    for p in model.parameters():
        if id(p) in seen or id(p) in skip:
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def flops_per_token(n_matmul_params: int, n_layers: int, seq_len: int, d_model: int) -> float:
    """6·N + 12·L·T·d: training FLOPs per token (module docstring)."""
    return 6.0 * n_matmul_params + 12.0 * n_layers * seq_len * d_model


def peak_flops(device: torch.device, precision: str, override: float | None = None) -> float | None:
    """The device's dense peak FLOP/s at this precision; `override` wins; None when unknown (CPUs)."""
    if override:
        return float(override)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return lookup_peak(torch.cuda.get_device_name(device), precision)


def lookup_peak(device_name: str, precision: str) -> float | None:
    """The table's peak for a device name such as "NVIDIA H100 80GB HBM3": the first entry whose words
    all appear as whole words (so "L4" is not an "L40S", nor "H100" an "H100 NVL"; the table lists the
    most specific names first)."""
    words = re.findall(r"[A-Za-z0-9]+", device_name)
    for entry, peaks in PEAK_FLOPS.items():
        wanted = entry.split()
        if any(words[i : i + len(wanted)] == wanted for i in range(len(words))):
            return peaks.get(precision)
    return None


def mfu(tokens_per_s: float | None, per_token: float, peak: float | None) -> float | None:
    if tokens_per_s is None or peak is None or peak <= 0:
        return None
    return tokens_per_s * per_token / peak
