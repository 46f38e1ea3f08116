"""Text sampled from a trained model."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class Codec(Protocol):
    eot_id: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@torch.no_grad()
def generate(
    model: nn.Module,
    codec: Codec,
    prompt: str,
    n_tokens: int,
    device: torch.device,
    *,
    temperature: float = 0.8,
    top_k: int = 40,
    seed: int = 0,
) -> str:
    """Continue `prompt` with up to n_tokens sampled tokens (top-k, temperature), stopping at end-of-text."""
    was_training = model.training
    model.eval()
    rng = torch.Generator(device=device).manual_seed(seed)
    ids = torch.tensor([codec.encode(prompt)], device=device)
    for _ in range(n_tokens):
        logits = model(ids[:, -model.context_length :])[0, -1].float() / temperature
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        probs = torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
        nxt = torch.multinomial(probs, 1, generator=rng)
        if nxt.item() == codec.eot_id:
            break
        ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    model.train(was_training)
    return codec.decode(ids[0].tolist())
