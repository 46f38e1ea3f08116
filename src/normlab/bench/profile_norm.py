"""How much of a training step normalization costs, and whether RMSNorm is faster than LayerNorm.

Two measurements, both single-threaded on the CPU, instrumentation off (the bare training step):

1. **Step time, ABBA-interleaved.** One trainer per norm type, same model otherwise, same batches.
   Blocks of `steps_per_block` steps alternate A B B A A B B A …, so drifts in machine speed (other
   processes, thermal) hit both equally. Each adjacent (A, B) pair gives log(t_A / t_B); their mean ±
   standard error is the speed effect (positive = B faster).
2. **torch.profiler breakdown.** Each norm module's forward runs inside a `normlab::norm` range; the
   backward nodes those forwards created are found by autograd sequence number (the node of sequence
   number s is created by the last forward op recorded with s) and their `evaluate_function` times
   summed. Share = (norm forward + norm backward) / step time, where a step is `normlab::step`
   (forward, loss, backward, clipping, optimizer step). The profiler adds a fixed cost per op, which
   inflates the share of norms made of many small ops (the unfused RMSNorm) — read it as an upper bound.

Also an analytic FLOP share: normalization ≈ 8 FLOPs per element per forward (LayerNorm: mean,
subtract, square, mean, rsqrt, multiply, scale, shift; RMSNorm a few fewer) against the matmul and
attention FLOPs counted by `torch.utils.flop_counter`.

    python -m normlab.bench.profile_norm                      # finding 5's preset's model (findings/rmsnorm_speed)
    python -m normlab.bench.profile_norm model=small depth=12 --blocks 12
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

NORM_RANGE = "normlab::norm"
STEP_RANGE = "normlab::step"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
PRESET = "findings/rmsnorm_speed"  # configs/experiment/findings/rmsnorm_speed.yaml
NORM_FLOPS_PER_ELEMENT = 8


def compose(overrides: Sequence[str], preset: str | None = PRESET, config_dir: Path | None = None):
    """The composed config of `preset` (an experiment preset, or None) with `overrides` (Hydra syntax)."""
    from normlab.config.compose import compose_config

    extra = [f"+experiment={preset}"] if preset else []
    return compose_config([*extra, *overrides], config_dir=config_dir)


def build_trainer(cfg, corpus=None, device: torch.device | str = "cpu"):
    """A Trainer for `cfg` on `device` with instrumentation off (only the global gradient norm is
    computed)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from normlab.data import load_corpus
    from normlab.train.loop import Trainer

    c = OmegaConf.to_container(cfg, resolve=True)
    corpus = corpus or load_corpus(c["data"], progress=False)
    torch.manual_seed(c["seed"])
    device = torch.device(device)
    model = instantiate(cfg.model).to(device)
    trainer = Trainer.from_config(
        c, model, corpus.train, corpus.val, device, metrics={**c["metrics"], "enabled": False}
    )
    return trainer, corpus


def norm_modules(model: nn.Module) -> list[nn.Module]:
    """Every filled norm slot of the GPT: the three slots of each residual branch and the final norm."""
    found = []
    for block in model.blocks:
        for branch in (block.attn, block.ffn):
            found += [branch.norm_in, branch.norm_out, branch.norm_add]
    found.append(model.final_norm)
    return [m for m in found if not isinstance(m, nn.Identity)]


def time_steps(trainer, steps: int) -> float:
    """Seconds per training step over `steps` steps."""
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step(update=True)
    return (time.perf_counter() - start) / steps


def abba(trainers: dict[str, Any], blocks: int, steps_per_block: int, warmup: int = 3) -> dict[str, Any]:
    """Interleaved timing of two trainers: per-step seconds of every block, in ABBA order."""
    (a, ta), (b, tb) = trainers.items()
    for t in (ta, tb):
        time_steps(t, warmup)
    order = [(a, b) if i % 2 == 0 else (b, a) for i in range(blocks)]
    times: dict[str, list[float]] = {a: [], b: []}
    for first, second in order:
        times[first].append(time_steps(trainers[first], steps_per_block))
        times[second].append(time_steps(trainers[second], steps_per_block))
    log_ratios = [math.log(x / y) for x, y in zip(times[a], times[b], strict=True)]
    n = len(log_ratios)
    mean = sum(log_ratios) / n
    se = (
        math.sqrt(sum((r - mean) ** 2 for r in log_ratios) / (n - 1) / n) if n > 1 else math.nan
    )  # SE of the mean log ratio
    return {
        "order": f"{a}/{b} alternating ABBA, {blocks} block pairs × {steps_per_block} steps",
        "step_s": times,
        "log_ratio": log_ratios,  # log(t_a / t_b) per block pair: positive = b faster
        "log_ratio_mean": mean,
        "log_ratio_se": se,
    }


def _inside(event, name: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == name:
            return True
        parent = parent.cpu_parent
    return False


def _in_backward(event) -> bool:
    parent = event
    while parent is not None:
        if parent.name.startswith(BACKWARD_PREFIX):
            return True
        parent = parent.cpu_parent
    return False


def profile_breakdown(trainer, steps: int) -> dict[str, Any]:
    """torch.profiler over `steps` training steps: per-step milliseconds of the whole step and of
    normalization (forward and backward), and the top ops by self time."""
    from torch.profiler import ProfilerActivity, profile, record_function

    wrapped = []
    for module in norm_modules(trainer.model):
        original = module.forward

        def forward(*args, _original=original, **kwargs):
            with record_function(NORM_RANGE):
                return _original(*args, **kwargs)

        module.forward = forward
        wrapped.append(module)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                with record_function(STEP_RANGE):
                    trainer.train_step(update=True)
    finally:
        for module in wrapped:
            del module.forward  # back to the class's forward
    events = list(prof.events())
    step_us = sum(e.cpu_time_total for e in events if e.name == STEP_RANGE)
    norm_fwd_us = sum(e.cpu_time_total for e in events if e.name == NORM_RANGE and not _inside(e, NORM_RANGE))
    # the node of sequence number s is created by the last forward op recorded with s
    creator: dict[int, Any] = {}
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.sequence_nr >= 0 and not _in_backward(e):
            creator[e.sequence_nr] = e
    norm_seqs = {s for s, e in creator.items() if _inside(e, NORM_RANGE)}
    norm_bwd_us = sum(
        e.cpu_time_total for e in events if e.name.startswith(BACKWARD_PREFIX) and e.sequence_nr in norm_seqs
    )
    top = sorted(prof.key_averages(), key=lambda k: k.self_cpu_time_total, reverse=True)[:8]
    return {
        "steps": steps,
        "step_ms": step_us / steps / 1e3,
        "norm_forward_ms": norm_fwd_us / steps / 1e3,
        "norm_backward_ms": norm_bwd_us / steps / 1e3,
        "norm_share": (norm_fwd_us + norm_bwd_us) / step_us if step_us else math.nan,
        "norm_calls_per_step": len(wrapped),
        "top_ops": [
            {"op": k.key, "self_ms_per_step": k.self_cpu_time_total / steps / 1e3, "calls": k.count // steps}
            for k in top
        ],
    }


def flop_share(trainer) -> dict[str, float]:
    """Analytic forward FLOPs: normalization (8 per element) vs matmuls/attention (flop counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = trainer.model
    x, _ = trainer.batch(trainer.val_tokens, torch.Generator().manual_seed(0))
    elements = 0

    def count(module, args, output):
        nonlocal elements
        elements += args[0].numel()

    handles = [m.register_forward_hook(count) for m in norm_modules(model)]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        for h in handles:
            h.remove()
    dense = float(counter.get_total_flops())
    norm = float(NORM_FLOPS_PER_ELEMENT * elements)
    return {"norm_flops": norm, "dense_flops": dense, "norm_flop_share": norm / (norm + dense)}


def run(
    overrides: Sequence[str] = (),
    norms: Sequence[str] = ("ln", "rms"),
    blocks: int = 8,
    steps_per_block: int = 5,
    profile_steps: int = 5,
    preset: str | None = PRESET,
    config_dir: Path | None = None,
) -> dict[str, Any]:
    """Both measurements for two norm types on the preset's model, single-threaded; a JSON-able dict."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(overrides, norms, blocks, steps_per_block, profile_steps, preset, config_dir)
    finally:
        torch.set_num_threads(threads)


def _run(overrides, norms, blocks, steps_per_block, profile_steps, preset, config_dir) -> dict[str, Any]:
    if len(norms) != 2:
        raise ValueError(f"profile_norm compares two norm types, got {list(norms)}")
    trainers, corpus, cfgs = {}, None, {}
    for norm in norms:
        cfg = compose([*overrides, f"norm={norm}"], preset, config_dir)
        trainers[norm], corpus = build_trainer(cfg, corpus)
        cfgs[norm] = cfg
    cfg = cfgs[norms[0]]
    result: dict[str, Any] = {
        "norms": list(norms),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": {
            "d_model": int(cfg.model.d_model),
            "n_heads": int(cfg.model.n_heads),
            "depth": int(cfg.depth),
            "placement": str(cfg.placement.name),
            "batch_size": int(cfg.train.batch_size),
            "seq_len": int(cfg.train.seq_len),
            "vocab_size": int(cfg.model.vocab_size),
        },
        "overrides": list(overrides),
    }
    started = time.perf_counter()
    result["timing"] = abba(trainers, blocks, steps_per_block)
    result["profile"] = {n: profile_breakdown(t, profile_steps) for n, t in trainers.items()}
    result["flops"] = {n: flop_share(t) for n, t in trainers.items()}
    result["wall_s"] = time.perf_counter() - started
    return result


def summary_lines(result: dict[str, Any]) -> list[str]:
    a, b = result["norms"]
    t = result["timing"]
    lines = [
        f"step time ({t['order']}): "
        + ", ".join(f"{n} {1e3 * sum(v) / len(v):.1f} ms" for n, v in t["step_s"].items())
        + f"; log({a}/{b}) = {t['log_ratio_mean']:+.4f} ± {t['log_ratio_se']:.4f} (positive: {b} faster)",
    ]
    for n, p in result["profile"].items():
        lines.append(
            f"{n}: profiled step {p['step_ms']:.1f} ms, norm forward {p['norm_forward_ms']:.2f} ms + backward "
            f"{p['norm_backward_ms']:.2f} ms = {100 * p['norm_share']:.1f}% of the step "
            f"({p['norm_calls_per_step']} norm modules); "
            f"FLOP share {100 * result['flops'][n]['norm_flop_share']:.2f}%"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m normlab.bench.profile_norm",
        description="Share of a training step spent in normalization (torch.profiler) and LayerNorm vs "
        "RMSNorm step time (ABBA-interleaved), single-threaded on the CPU.",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides on top of the preset, e.g. depth=12")
    parser.add_argument("--preset", default=PRESET, help=f"experiment preset to start from ({PRESET})")
    parser.add_argument("--norms", default="ln,rms", help="the two norm types to compare (ln,rms)")
    parser.add_argument("--blocks", type=int, default=8, help="ABBA block pairs")
    parser.add_argument("--steps-per-block", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    result = run(
        args.overrides,
        norms=args.norms.split(","),
        blocks=args.blocks,
        steps_per_block=args.steps_per_block,
        profile_steps=args.profile_steps,
        preset=args.preset or None,
    )
    for line in summary_lines(result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
