"""normlab's whole training loop, instrumentation on, against a nanoGPT-style minimal loop, same model.

    python scripts/bench_loop.py                      # norm=ln placement=pre depth=6, model=small, CPU
    python scripts/bench_loop.py --blocks 4 model=tiny

The minimal loop is what nanoGPT's train.py does per step, written here for the comparison: draw
`batch_size` random windows with a Python list of slices, forward, cross-entropy, backward,
`clip_grad_norm_`, AdamW step, zero_grad, and `loss.item()` (nanoGPT logs every step by default, one host
sync per step). normlab's loop adds per-layer and per-sublayer gradient norms every step, the instrumented
steps every `metrics.every`, spike detection and a metrics.jsonl row per step — and must still be faster.

Both sides get the same model class and initial weights, the same batch shape and the same optimizer
settings; blocks of steps alternate in ABBA order so drifts in machine speed hit both equally.
Prints steps/s of each and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from bench_overhead import DEFAULT_OVERRIDES, compose_cfg, make_trainer, run_steps
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.metrics.sinks import JsonlSink


class MinimalLoop:
    """A nanoGPT-style training step, with nothing measured but the loss."""

    def __init__(self, cfg, tokens: np.ndarray) -> None:
        c = OmegaConf.to_container(cfg, resolve=True)
        torch.manual_seed(c["seed"])
        self.model = instantiate(cfg.model)
        self.tokens = tokens
        self.batch_size, self.seq_len = c["train"]["batch_size"], c["train"]["seq_len"]
        self.grad_clip = c["train"]["grad_clip"]
        o = c["optim"]
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=o["lr"],
            betas=tuple(o["betas"]),
            eps=o["eps"],
            weight_decay=o["weight_decay"],
        )

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(self.tokens) - self.seq_len - 1, (self.batch_size,))
        x = torch.stack([torch.from_numpy(self.tokens[i : i + self.seq_len].astype(np.int64)) for i in ix])
        y = torch.stack(
            [torch.from_numpy(self.tokens[i + 1 : i + 1 + self.seq_len].astype(np.int64)) for i in ix]
        )
        return x, y

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        self.model.train()
        for _ in range(steps):
            x, y = self.get_batch()
            logits = self.model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            loss.backward()
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            loss.item()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=6, help="timed blocks per side (default 6)")
    p.add_argument("--block-steps", type=int, default=20, help="steps per block, a multiple of metrics.every")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=tiny depth=12")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose_cfg(args.overrides)
    tokens = np.random.default_rng(0).integers(0, cfg.model.vocab_size, 2_000_000).astype(np.uint16)
    with tempfile.TemporaryDirectory() as tmp:
        ours, sink = make_trainer(cfg, tokens, True, Path(tmp)), JsonlSink(Path(tmp) / "metrics.jsonl")
        minimal = MinimalLoop(cfg, tokens)
        run_steps(ours, sink, 10)  # warm up both (allocator, first-call costs)
        minimal.run(10)
        times: dict[str, list[float]] = {"normlab": [], "minimal": []}
        for b in range(args.blocks):
            order = ("normlab", "minimal") if b % 2 == 0 else ("minimal", "normlab")
            for side in order:
                t = (
                    run_steps(ours, sink, args.block_steps)
                    if side == "normlab"
                    else minimal.run(args.block_steps)
                )
                times[side].append(t)
            print(
                f"block {b + 1}/{args.blocks}: normlab {times['normlab'][-1]:.2f} s, "
                f"minimal {times['minimal'][-1]:.2f} s ({args.block_steps} steps each)",
                flush=True,
            )
        sink.close()
    steps = args.blocks * args.block_steps
    ours_sps, minimal_sps = steps / sum(times["normlab"]), steps / sum(times["minimal"])
    paired = [m / o for o, m in zip(times["normlab"], times["minimal"], strict=True)]
    print(
        f"normlab loop (instrumented): {ours_sps:.3f} steps/s; nanoGPT-style minimal loop: {minimal_sps:.3f} "
        f"steps/s ({steps} steps each, {torch.get_num_threads()} threads, "
        f"{' '.join([*DEFAULT_OVERRIDES, *args.overrides])})"
    )
    print(
        f"speed ratio normlab / minimal: {ours_sps / minimal_sps:.4f} "
        f"(median of block ratios {statistics.median(paired):.4f}; > 1 means normlab is faster)"
    )
    return {
        "normlab_steps_per_s": ours_sps,
        "minimal_steps_per_s": minimal_sps,
        "ratio": ours_sps / minimal_sps,
    }


if __name__ == "__main__":
    main()
