"""Text sampled from a trained model, and the sample a completed run writes (sample.txt)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from normlab.io import write_text_atomic
from normlab.train.run_dir import SAMPLE_FILE

log = logging.getLogger("normlab")


class Codec(Protocol):
    eot_id: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@contextlib.contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """One torch thread on the CPU for the duration: a batch of one sequence is too small to split, and
    with every core busy (a parallel sweep) a second thread only waits for the first; a 120-token sample
    took 0.6 s on one thread and 8.7 s on two busy ones (issue 11)."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def next_token_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of the token after `ids` (batch 1): the LM head on the last position only, where the model
    exposes its hidden states, instead of on every position."""
    if hasattr(model, "features") and hasattr(model, "head"):
        return model.head(model.features(ids)[0, -1])
    return model(ids)[0, -1]


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
    """Continue `prompt` with up to n_tokens sampled tokens (top-k, temperature), stopping at end-of-text.

    Each token re-reads the whole window (no KV cache): at these model sizes that is a few milliseconds a
    token on one thread, so a cache would save under a second per run.
    """
    was_training = model.training
    model.eval()
    rng = torch.Generator(device=device).manual_seed(seed)
    ids = torch.tensor([codec.encode(prompt)], device=device)
    with one_thread(device):
        for _ in range(n_tokens):
            logits = next_token_logits(model, ids[:, -model.context_length :]).float() / temperature
            kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
            probs = torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
            nxt = torch.multinomial(probs, 1, generator=rng)
            if nxt.item() == codec.eot_id:
                break
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    model.train(was_training)
    return codec.decode(ids[0].tolist())


def one_line(text: str) -> str:
    """A sample as one console line, its line breaks shown as ⏎: a multi-line sample printed as it is would
    put lines without the log prefix (and, in a sweep, without the run's name) among other jobs' lines;
    sample.txt keeps it as generated."""
    return " ⏎ ".join(text.splitlines())


def write_sample(
    model: nn.Module, codec: Codec, cfg: Mapping[str, Any], device: torch.device, run_dir: Path, prefix: str
) -> None:
    """The run's sample (train.sample_tokens after train.sample_prompt, its seed) into sample.txt and, as one
    line after `prefix`, the console; nothing when train.sample_tokens is 0."""
    train = cfg["train"]
    if train["sample_tokens"] <= 0:
        return
    text = generate(model, codec, train["sample_prompt"], train["sample_tokens"], device, seed=cfg["seed"])
    write_text_atomic(run_dir / SAMPLE_FILE, text + "\n")
    log.info("%ssample: %s", prefix, one_line(text))
