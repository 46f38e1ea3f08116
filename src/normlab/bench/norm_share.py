"""Can RMSNorm save the claimed 7 % of a training step on this device? Finding 5's speed measurement.

RMSNorm's claim (Zhang & Sennrich 2019, abstract: "reduces the running time by 7%~64%") is about how
much of a training step normalization costs and how much of that dropping the mean saves. Two
measurements, on the device asked for (a GPU where there is one), with the models' own norm modules —
`nn.LayerNorm` (`F.layer_norm`) and normlab's RMSNorm, which off the CPU runs torch's `F.rms_norm` (on a
GPU both are single fused kernels, so the comparison is of the two operations, not of two
implementations):

1. **The norm's share of a LayerNorm step.** For each repetition: the seconds of one training step of the
   LayerNorm model, and the seconds of a forward and backward of every one of its norm modules on inputs
   of the shapes they see in that step, run on their own; share = norm time / step time. Run alone, a
   norm cannot overlap other work or be fused into it, so the share is an upper bound of what the norm
   costs inside the step: RMSNorm cannot save more of a step than this. Where it is below the claimed
   saving, the claim cannot show on this device and model (finding 5's precondition).
2. **Step time, ABBA-interleaved.** Blocks of steps of the LayerNorm and the RMSNorm model alternate
   A B B A …, so drifts in machine speed hit both alike; log(t_LN / t_RMS) per block pair (positive:
   RMSNorm faster).

Timings synchronise the device before reading the clock. On a CPU the same code runs (the tests use it),
but there torch has no fused RMSNorm backward and normlab's RMSNorm is its own autograd Function: finding
5 reads a CPU measurement as "not the device the claim is about".

    python -m normlab.bench.norm_share --device cuda --json norm_share.json     # finding 5's preset model
    python -m normlab.bench.norm_share --device cuda model=base depth=12 train.batch_size=32 \\
        --json outputs/reproduce/final/sweeps/rmsnorm_speed/norm_share.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from normlab.bench.profile_norm import PRESET, build_trainer, compose, norm_modules


def pick_device(device: str = "auto") -> torch.device:
    """`auto`: the GPU when there is one, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def timed(fn: Callable[[], Any], sync: Callable[[], None], repeat: int = 1) -> float:
    """Seconds per call of `fn`, over `repeat` calls, the device synchronised before and after."""
    sync()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - start) / repeat


def norm_inputs(trainer) -> list[tuple[torch.nn.Module, torch.Size, torch.dtype]]:
    """Each norm module of the model with the shape and dtype of what it receives in a training step."""
    seen: list[tuple[torch.nn.Module, torch.Size, torch.dtype]] = []
    handles = [
        m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0].shape, args[0].dtype)))
        for m in norm_modules(trainer.model)
    ]
    try:
        x, _ = trainer.batch(trainer.val_tokens, torch.Generator().manual_seed(0))
        with torch.no_grad(), trainer.autocast():
            trainer.model(x.to(trainer.device))
    finally:
        for h in handles:
            h.remove()
    return seen


def norms_alone(calls, device: torch.device) -> Callable[[], None]:
    """One forward and backward of every norm call of a step, on random inputs of its shape."""
    inputs = [
        (m, torch.randn(shape, device=device, dtype=dtype, requires_grad=True)) for m, shape, dtype in calls
    ]
    grads = [torch.randn_like(x) for _, x in inputs]

    def run() -> None:
        for (m, x), g in zip(inputs, grads, strict=True):
            m(x).backward(g)

    return run


def measure(
    trainers: dict[str, Any], device: torch.device, reps: int, steps: int, warmup: int = 3
) -> dict[str, Any]:
    """Both measurements on built trainers ({'ln': …, 'rms': …})."""
    sync = synchronizer(device)
    ln, rms = trainers["ln"], trainers["rms"]
    for t in (ln, rms):
        timed(lambda t=t: t.train_step(update=True), sync, warmup)
    calls = norm_inputs(ln)
    alone = norms_alone(calls, device)
    timed(alone, sync, warmup)
    share_step, share_norm = [], []
    for _ in range(reps):
        share_step.append(timed(lambda: ln.train_step(update=True), sync, steps))
        share_norm.append(timed(alone, sync, steps))
    step_s: dict[str, list[float]] = {"ln": [], "rms": []}
    for i in range(reps):
        order = ("ln", "rms") if i % 2 == 0 else ("rms", "ln")
        for name in order:
            t = trainers[name]
            step_s[name].append(timed(lambda t=t: t.train_step(update=True), sync, steps))
    return {
        "norm_calls_per_step": len(calls),
        "norm_shapes": sorted({str(tuple(shape)) for _, shape, _ in calls}),
        "share": [n / s for n, s in zip(share_norm, share_step, strict=True)],
        "share_step_s": share_step,
        "share_norm_s": share_norm,
        "step_s": step_s,
        "log_ratio": [math.log(a / b) for a, b in zip(step_s["ln"], step_s["rms"], strict=True)],
        "order": f"ln/rms alternating ABBA, {reps} block pairs × {steps} steps",
    }


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def run(
    overrides: Sequence[str] = (),
    device: str = "auto",
    reps: int = 10,
    steps: int = 10,
    preset: str | None = PRESET,
    config_dir: Path | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The measurement for the preset's model (with `overrides`), LayerNorm against RMSNorm; a JSON-able
    dict. On the CPU with `threads` (default: torch's) threads."""
    dev = pick_device(device)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        trainers, corpus, cfg = {}, None, None
        for norm in ("ln", "rms"):
            cfg = compose([*overrides, f"norm={norm}", f"train.device={dev.type}"], preset, config_dir)
            trainers[norm], corpus = build_trainer(cfg, corpus, dev)
        started = time.perf_counter()
        result = measure(trainers, dev, reps, steps)
    finally:
        torch.set_num_threads(before)
    return {
        "device": dev.type,
        "device_name": device_name(dev),
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if threads is None else threads,
        "precision": str(cfg.train.precision),
        "model": {
            "d_model": int(cfg.model.d_model),
            "depth": int(cfg.depth),
            "placement": str(cfg.placement.name),
            "batch_size": int(cfg.train.batch_size),
            "seq_len": int(cfg.train.seq_len),
            "vocab_size": int(cfg.model.vocab_size),
        },
        "overrides": list(overrides),
        **result,
        "wall_s": time.perf_counter() - started,
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    share = result["share"]
    ratios = result["log_ratio"]
    mean_share = sum(share) / len(share)
    mean_ratio = sum(ratios) / len(ratios)
    return [
        f"{result['device']} ({result['device_name']}), torch {result['torch']}, {result['precision']}: "
        f"LayerNorm's norms alone are {100 * mean_share:.1f} % of its step "
        f"({result['norm_calls_per_step']} calls; an upper bound of what RMSNorm can save)",
        f"step time ({result['order']}): log(t_LN / t_RMS) = {mean_ratio:+.4f} "
        f"(positive: RMSNorm faster; the claim's smallest saving is {-math.log(0.93):.4f})",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m normlab.bench.norm_share",
        description="LayerNorm's share of a training step and LayerNorm vs RMSNorm step time on one device "
        "(finding 5's speed measurement; docstring of normlab.bench.norm_share).",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides on top of the preset, e.g. depth=12")
    parser.add_argument("--preset", default=PRESET, help=f"experiment preset to start from ({PRESET})")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda (auto: cuda when there is one)")
    parser.add_argument("--reps", type=int, default=10, help="repetitions (share) and ABBA block pairs")
    parser.add_argument("--steps", type=int, default=10, help="training steps per timed block")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's)")
    parser.add_argument(
        "--json", type=Path, help="also write the result here (finding 5 reads norm_share.json)"
    )
    args = parser.parse_args(argv)
    result = run(
        args.overrides,
        device=args.device,
        reps=args.reps,
        steps=args.steps,
        preset=args.preset or None,
        threads=args.threads,
    )
    for line in summary_lines(result):
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
