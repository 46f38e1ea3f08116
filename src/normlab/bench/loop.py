"""normlab's whole training loop, instrumentation on, against nanoGPT's minimal loop on the same model shape.

    python scripts/bench_loop.py --nanogpt ~/src/nanoGPT           # nanoGPT's own model.py, from a checkout
    python scripts/bench_loop.py                                   # the in-repo stand-in (no checkout needed)
    python scripts/bench_loop.py --nanogpt ~/src/nanoGPT --compile both   # torch.compile on both sides

The shape is nanoGPT-like and fixed unless overridden: LayerNorm, pre-norm, 6 blocks, d_model 128, 4 heads,
context 128, batch 32, vocabulary 4096, no biases, no dropout (normlab: `norm=ln placement=pre depth=6
model=small model.bias=false norm.bias=false model.dropout=0.0 data.vocab_size=4096`).

normlab side: `Trainer.fit` exactly as a run uses it, with the default `metrics` config (global, per-block
and per-sublayer gradient norms every step; parameter norms, update ratios, activation RMS, attention and
output logits every 10 steps), spike detection with its forensics history, and a metrics.jsonl row per
step. `--compile both|normlab` sets `train.compile=true`.

Other side, `--nanogpt PATH`: nanoGPT's `model.py` (PATH is a checkout, or the file itself) imported at run
time — its GPT, GPTConfig and `configure_optimizers` — driven the way its train.py drives it on a CPU: a
batch of random windows cut with a Python list of slices, the model's own loss (`logits, loss = model(X,
Y)`), the next batch fetched before the backward, gradient clipping through the (disabled) GradScaler,
the optimizer step, `zero_grad(set_to_none=True)` and `loss.item()` every step (its log_interval is 1);
learning rate set on every step from a warmup + cosine schedule; no evaluation, no checkpoints, no
printing. `--compile both` wraps it in torch.compile as its train.py does by default. Without
`--nanogpt`, the same loop drives normlab's GPT with `F.cross_entropy` (the in-repo stand-in).

Both sides start from their own init with the same seed and see random token ids (the compute per step
does not depend on the text). Timed blocks of `--block-steps` steps alternate A B | B A | A B …, and each
block pair gives a ratio (other side's time / normlab's time, > 1 = normlab faster); the headline is the
median over pairs, so a burst of load from another process moves one pair, not the result — and so does
the dense start (every step ≤ `metrics.dense_until` instrumented, a once-per-run cost that falls in the
first timed block): the headline is the steady-state ratio. The machine's
load average is printed before and after: on a shared machine quote it with the result.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.bench.clock import CLOCKS, add_clock_argument
from normlab.bench.overhead import compose_cfg, make_trainer, run_steps
from normlab.metrics.sinks import JsonlSink

CPU = torch.device("cpu")

SHAPE = [
    "model=small",
    "model.bias=false",
    "norm.bias=false",
    "model.dropout=0.0",
    "data.vocab_size=4096",
    "train.batch_size=32",
]


def load_nanogpt(path: Path) -> Any:
    """nanoGPT's model.py as a module, from a checkout directory or the file itself."""
    file = path / "model.py" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"--nanogpt {path}: no model.py there; point it at a nanoGPT checkout.")
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MinimalLoop:
    """nanoGPT's train.py step, for a model given as `loss(x, y) -> scalar` and its optimizer: on a CPU, or
    on a GPU as train.py runs there (batches through pinned memory, non-blocking; autocast at
    `amp_dtype`; its GradScaler enabled for float16 only)."""

    def __init__(
        self,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        params: list[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        tokens: np.ndarray,
        c: dict[str, Any],
        device: torch.device = CPU,
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        self.loss, self.params, self.optimizer, self.tokens = loss, params, optimizer, tokens
        self.device, self.amp_dtype = device, amp_dtype
        self.batch_size, self.block_size = c["train"]["batch_size"], c["train"]["seq_len"]
        self.grad_clip = c["train"]["grad_clip"]
        self.lr, self.min_lr = c["optim"]["lr"], c["optim"]["min_lr"]
        self.warmup, self.decay_steps = 100, 10_000
        self.scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
        self.iter = 0
        self.x, self.y = self.get_batch()

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        data, n = self.tokens, self.block_size
        ix = torch.randint(len(data) - n, (self.batch_size,))
        x = torch.stack([torch.from_numpy(data[i : i + n].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + n].astype(np.int64)) for i in ix])
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(
                self.device, non_blocking=True
            )
        return x, y

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def lr_at(self, it: int) -> float:
        if it < self.warmup:
            return self.lr * (it + 1) / (self.warmup + 1)
        ratio = min(1.0, (it - self.warmup) / (self.decay_steps - self.warmup))
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (self.lr - self.min_lr)

    def run(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr_at(self.iter)
            with self.autocast():
                loss = self.loss(self.x, self.y)
            self.x, self.y = self.get_batch()
            self.scaler.scale(loss).backward()
            if self.grad_clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            loss.item()
            self.iter += 1
        return time.perf_counter() - start


def nanogpt_loop(
    module: Any,
    c: dict[str, Any],
    tokens: np.ndarray,
    compiled: bool,
    device: torch.device = CPU,
    amp_dtype: torch.dtype | None = None,
) -> MinimalLoop:
    m, o = c["model"], c["optim"]
    torch.manual_seed(c["seed"])
    config = module.GPTConfig(
        block_size=m["context_length"],
        vocab_size=m["vocab_size"],
        n_layer=m["n_layers"],
        n_head=m["n_heads"],
        n_embd=m["d_model"],
        dropout=m["dropout"],
        bias=m["bias"],
    )
    model = module.GPT(config).to(device)
    # its configure_optimizers picks fused AdamW itself where it can (CUDA)
    optimizer = model.configure_optimizers(o["weight_decay"], o["lr"], tuple(o["betas"]), device.type)
    params = list(model.parameters())
    model.train()
    if compiled:
        model = torch.compile(model)
    return MinimalLoop(lambda x, y: model(x, y)[1], params, optimizer, tokens, c, device, amp_dtype)


def standin_loop(cfg: Any, c: dict[str, Any], tokens: np.ndarray, compiled: bool) -> MinimalLoop:
    """The same loop around normlab's GPT, with nanoGPT's optimizer setup (decay on ≥2-D tensors, AdamW
    not fused on a CPU)."""
    torch.manual_seed(c["seed"])
    model = instantiate(cfg.model)
    model.train()
    params = list(model.parameters())
    o = c["optim"]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": o["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]))
    forward = torch.compile(model) if compiled else model

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = forward(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    return MinimalLoop(loss, params, optimizer, tokens, c)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, default=None, help="a nanoGPT checkout (or its model.py)")
    p.add_argument("--compile", choices=("none", "both", "normlab"), default="none", help="torch.compile")
    p.add_argument("--blocks", type=int, default=8, help="timed block pairs (default 8)")
    p.add_argument("--block-steps", type=int, default=20, help="steps per block, a multiple of metrics.every")
    p.add_argument("--warmup-steps", type=int, default=10, help="untimed steps per side first (compiles)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    add_clock_argument(p)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for both sides, e.g. depth=12")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    compile_ours = args.compile in ("both", "normlab")
    compile_other = args.compile == "both"
    overrides = [*SHAPE, *args.overrides, *(["train.compile=true"] if compile_ours else [])]
    cfg = compose_cfg(overrides)
    c = OmegaConf.to_container(cfg, resolve=True)
    other = "nanogpt" if args.nanogpt else "stand-in"
    tokens = np.random.default_rng(0).integers(0, c["model"]["vocab_size"], 2_000_000).astype(np.uint16)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        ours, sink = make_trainer(cfg, tokens, True, Path(tmp)), JsonlSink(Path(tmp) / "metrics.jsonl")
        if args.nanogpt:
            theirs = nanogpt_loop(load_nanogpt(args.nanogpt), c, tokens, compile_other)
        else:
            theirs = standin_loop(cfg, c, tokens, compile_other)
        clock = CLOCKS[args.clock]

        def timed(side: str, steps: int) -> float:
            start = clock()
            run_steps(ours, sink, steps) if side == "normlab" else theirs.run(steps)
            return clock() - start

        warm = {side: timed(side, args.warmup_steps) for side in ("normlab", other)}
        print(
            f"warm-up ({args.warmup_steps} steps, compiling if asked): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in warm.items()),
            flush=True,
        )
        times: dict[str, list[float]] = {"normlab": [], other: []}
        for b in range(args.blocks):
            order = ("normlab", other) if b % 2 == 0 else (other, "normlab")
            for side in order:
                times[side].append(timed(side, args.block_steps))
            print(
                f"block {b + 1}/{args.blocks} ({' then '.join(order)}): normlab {times['normlab'][-1]:.2f} s, "
                f"{other} {times[other][-1]:.2f} s, ratio {times[other][-1] / times['normlab'][-1]:.3f}",
                flush=True,
            )
        sink.close()
    load_after = os.getloadavg()
    ratios = [t / o for o, t in zip(times["normlab"], times[other], strict=True)]
    steps = args.blocks * args.block_steps
    result = {
        "other": other,
        "nanogpt": str(args.nanogpt) if args.nanogpt else None,
        "compile": args.compile,
        "config": " ".join(overrides),
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "torch": torch.__version__,
        "block_steps": args.block_steps,
        "blocks": args.blocks,
        "tokens_per_step": c["train"]["batch_size"] * c["train"]["seq_len"],
        "normlab_steps_per_s": steps / sum(times["normlab"]),
        "other_steps_per_s": steps / sum(times[other]),
        "ratio_of_totals": sum(times[other]) / sum(times["normlab"]),
        "block_ratios": ratios,
        "ratio": statistics.median(ratios),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "block_s": times,
    }
    tps = result["tokens_per_step"]
    print(
        f"normlab (instrumented{', compiled' if compile_ours else ''}): {result['normlab_steps_per_s']:.3f} steps/s "
        f"({result['normlab_steps_per_s'] * tps:,.0f} tokens/s); {other}{' (compiled)' if compile_other else ''}: "
        f"{result['other_steps_per_s']:.3f} steps/s ({result['other_steps_per_s'] * tps:,.0f} tokens/s); "
        f"{steps} steps each, {result['threads']} threads, {args.clock} time"
    )
    print(
        f"speed ratio normlab / {other}: {result['ratio']:.3f} (median of {args.blocks} block pairs; "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}; ratio of totals {result['ratio_of_totals']:.3f}; "
        f"> 1 means normlab is faster)"
    )
    print(
        "load average (1, 5, 15 min) before: "
        + ", ".join(f"{v:.2f}" for v in load_before)
        + "; after: "
        + ", ".join(f"{v:.2f}" for v in load_after)
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
