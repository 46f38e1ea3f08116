"""Random training windows from a flat token stream."""

from __future__ import annotations

import numpy as np
import torch


def sample_windows(
    tokens: np.ndarray, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw `batch_size` random windows of `seq_len` tokens and their next-token targets.

    One vectorised gather per batch: no per-token Python work. Returns int64 tensors (batch, seq_len).
    """
    n_starts = len(tokens) - seq_len - 1
    if n_starts < 1:
        raise ValueError(f"a token stream of {len(tokens)} tokens is too short for windows of {seq_len}")
    starts = torch.randint(n_starts + 1, (batch_size,), generator=generator).numpy()
    idx = starts[:, None] + np.arange(seq_len + 1)
    window = torch.from_numpy(tokens[idx].astype(np.int64))
    return window[:, :-1], window[:, 1:]
