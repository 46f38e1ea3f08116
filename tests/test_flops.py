"""MFU's FLOP count (6·N + 12·L·T·d, PaLM appendix B) against numbers computed by hand."""

from __future__ import annotations

import pytest
import torch

from normlab.model.gpt import GPT
from normlab.train import flops


def gpt(tie: bool, bias: bool = False) -> GPT:
    return GPT(
        vocab_size=100,
        context_length=16,
        d_model=8,
        n_heads=2,
        n_layers=2,
        norm={"name": "ln"},
        placement="pre",
        tie_embeddings=tie,
        bias=bias,
    )


def test_matmul_params_count_blocks_and_head_once():
    # d=8, no biases: per block qkv 8·24 + out 8·8 + FFN 8·32 + 32·8 = 768 weights, two LayerNorms
    # (weight and bias) 2·16 = 32; final norm 16; head 100·8 = 800 (tied: the embedding is that matrix).
    by_hand = 2 * (768 + 32) + 16 + 800
    assert flops.matmul_params(gpt(tie=True)) == by_hand
    assert flops.matmul_params(gpt(tie=False)) == by_hand  # an untied embedding is a lookup, not a product


def test_flops_per_token_by_hand():
    assert flops.flops_per_token(1000, n_layers=2, seq_len=16, d_model=8) == 6 * 1000 + 12 * 2 * 16 * 8


def test_mfu_by_hand_and_unknown_peaks():
    assert flops.mfu(1000.0, 2e9, 4e12) == pytest.approx(0.5)
    assert flops.mfu(None, 2e9, 4e12) is None
    assert flops.mfu(1000.0, 2e9, None) is None
    assert flops.peak_flops(torch.device("cpu"), "fp32") is None  # nothing to look up on a CPU
    assert flops.peak_flops(torch.device("cpu"), "fp32", override=1e12) == 1e12


def test_peak_table_prefers_the_specific_name():
    names = list(flops.PEAK_FLOPS)
    assert names.index("H100 PCIe") < names.index("H100") and names.index("L40S") < names.index("L4")
    assert flops.PEAK_FLOPS["H100"]["bf16"] == 989e12 and flops.PEAK_FLOPS["A100"]["bf16"] == 312e12


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA L40", 181e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_device_names_find_their_own_peak(name, peak):
    assert flops.lookup_peak(name, "bf16") == peak
