"""The batches one rank trains and evaluates on, and where a step's batches came from.

Every rank draws the same global batch (batch_size × world_size windows) from the same seeded stream and
keeps its own slice, so the ranks' windows are disjoint and together are a 1-rank run's batch.
"""

from __future__ import annotations

import numpy as np
import torch

from normlab.data.batches import sample_windows
from normlab.distributed import Dist


class StreamPositions:
    """Stands in for a token stream of length n whose token at i is i: windows drawn from it are their
    own positions, so replaying the data RNG through `sample_windows` recovers where a batch came from."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray(idx)


class RankBatches:
    """This rank's slice of each global batch of `batch_size` windows per rank, on `device`."""

    def __init__(self, batch_size: int, seq_len: int, dist: Dist, device: torch.device) -> None:
        self.batch_size, self.seq_len, self.dist, self.device = batch_size, seq_len, dist, device

    def draw(self, tokens: np.ndarray, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        b, d = self.batch_size, self.dist
        x, y = sample_windows(tokens, b * d.world_size, self.seq_len, rng)
        if d.enabled:
            x, y = x[d.rank * b : (d.rank + 1) * b], y[d.rank * b : (d.rank + 1) * b]
        return self.to_device(x), self.to_device(y)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def window_starts(self, n_tokens: int, rng_state: torch.Tensor, micro_batches: int) -> list[list[int]]:
        """For each of a step's micro-batches, the start offset in the training stream of each window of the
        global batch, recovered by replaying the data RNG from the state the step started from."""
        rng = torch.Generator()
        rng.set_state(rng_state)
        stream = StreamPositions(n_tokens)
        global_batch = self.batch_size * self.dist.world_size
        return [
            sample_windows(stream, global_batch, self.seq_len, rng)[0][:, 0].tolist()
            for _ in range(micro_batches)
        ]
