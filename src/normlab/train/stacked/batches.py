"""`StackedBatches`: every member's training batches, drawn as its run alone draws them, a block of steps ahead.

A run alone draws each micro-batch's window starts with one `torch.randint` from its data RNG
(normlab.data.batches.sample_windows). A member's generator draws the same numbers whether it is asked for
one micro-batch at a time or for a block of them in one call (the stream is consumed in order), so each
member's starts for the next `block` steps are drawn at once — the only per-member Python, once per block —
and every step gathers all members' windows with one indexing of the token stream: (members, batch, time).

What a checkpoint saves of a member's data RNG is its state after the micro-batches trained so far
(`rng_state`: the block's starting state, replayed that far), and a spike report's batch positions are read
back from the block (`starts`), so a member's run keeps its run alone's data order and records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from normlab.train.batches import RankBatches


class StackedBatches:
    """Batches of `batch_size` windows of `seq_len` tokens from `tokens` for each member, member m's drawn
    with `rngs[m]`, `micro_batches` per step, on `device` (through `to_device`); `block` steps drawn at once,
    and a block kept while `keep_steps` steps may still ask where their batches came from."""

    def __init__(
        self,
        tokens: np.ndarray,
        rngs: Sequence[torch.Generator],
        batches: RankBatches,
        micro_batches: int,
        block: int,
        keep_steps: int,
    ) -> None:
        self.tokens, self.rngs, self.batches = tokens, list(rngs), batches
        self.micro, self.block, self.keep = micro_batches, max(1, block), max(1, keep_steps)
        self.n_starts = len(tokens) - batches.seq_len - 1
        if self.n_starts < 1:
            raise ValueError(
                f"a token stream of {len(tokens)} tokens is too short for windows of {batches.seq_len}"
            )
        self.offsets = np.arange(batches.seq_len + 1)
        self.reset(0)

    def reset(self, step: int) -> None:
        """The members' generators were set (a resume at `step`): the next micro-batch is drawn afresh."""
        self.base_step = step  # the step of micro-batch 0
        self.drawn = 0  # micro-batches drawn since
        # block start (micro-batch index) → (each member's generator state before it, starts (members, n, batch))
        self.blocks: dict[int, tuple[list[torch.Tensor], np.ndarray]] = {}
        self.current: tuple[int, np.ndarray] | None = None

    def _refill(self) -> np.ndarray:
        """Draw every member's starts for the next `block` steps."""
        n, b = self.block * self.micro, self.batches.batch_size
        states = [rng.get_state() for rng in self.rngs]
        starts = np.stack(
            [
                torch.randint(self.n_starts + 1, (n * b,), generator=rng).numpy().reshape(n, b)
                for rng in self.rngs
            ]
        )
        self.blocks[self.drawn] = (states, starts)
        oldest = self.drawn - self.keep * self.micro  # blocks no pending row can ask about any more
        for start in [k for k in self.blocks if k + n <= oldest]:
            del self.blocks[start]
        self.current = (self.drawn, starts)
        return starts

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's next micro-batch: token ids and targets, (members, batch, seq_len) each."""
        if self.current is None or self.drawn - self.current[0] >= self.current[1].shape[1]:
            self._refill()
        assert self.current is not None
        start, starts = self.current
        rows = starts[:, self.drawn - start]  # (members, batch)
        self.drawn += 1
        window = torch.from_numpy(self.tokens[rows[..., None] + self.offsets].astype(np.int64))
        return self.batches.to_device(window[..., :-1]), self.batches.to_device(window[..., 1:])

    def _block_of(self, index: int) -> tuple[int, list[torch.Tensor], np.ndarray] | None:
        for start, (states, starts) in self.blocks.items():
            if start <= index < start + starts.shape[1]:
                return start, states, starts
        return None

    def rng_state(self, m: int) -> torch.Tensor:
        """Member m's data-RNG state after the micro-batches drawn so far (what its run alone would save)."""
        found = self._block_of(self.drawn) if self.current is not None else None
        if found is None:  # nothing drawn ahead, or exactly at a block's end: the generator is there
            if self.current is None or self.drawn == self.current[0] + self.current[1].shape[1]:
                return self.rngs[m].get_state()
            raise AssertionError("the block that holds the next micro-batch is gone")
        start, states, _ = found
        replay = torch.Generator()
        replay.set_state(states[m])
        if self.drawn > start:
            torch.randint(
                self.n_starts + 1, ((self.drawn - start) * self.batches.batch_size,), generator=replay
            )
        return replay.get_state()

    def starts(self, m: int, step: int) -> Callable[[], list[list[int]]] | None:
        """Where member m's windows of `step` start, per micro-batch (read when a report needs it); None
        where the block is no longer kept."""
        first = (step - self.base_step) * self.micro
        found = self._block_of(first)
        if found is None or first < 0:
            return None
        start, _, starts = found
        rows = starts[m, first - start : first - start + self.micro]
        return lambda: [[int(s) for s in row] for row in rows]
