"""normlab against nanoGPT on one GPU, at the GPT-2-small shape: tokens/s, the ratio to nanoGPT, and MFU.

    python scripts/bench_gpu.py --nanogpt ~/src/nanoGPT            # the whole table (about 4 minutes on an H200)
    python scripts/bench_gpu.py --nanogpt ~/src/nanoGPT --breakdown   # ... and what an instrumented step costs

The shape is GPT-2 small unless overridden: d_model 768, 12 blocks, 12 heads, context 1024, batch 12,
vocabulary 50304, no biases, no dropout, LayerNorm, pre-norm, tied embeddings, bfloat16 autocast. Four sides:

- nanoGPT: its `model.py` from a checkout (`--nanogpt`), driven as its train.py drives it on a GPU
  (normlab.bench.loop.MinimalLoop): batches cut from a token array through pinned memory, non-blocking;
  `model(X, Y)` under autocast, the next batch fetched during the forward, clipping at 1.0, the fused AdamW
  its `configure_optimizers` picks, `loss.item()` every step (its log_interval is 1); torch.compile;
- normlab bare: `Trainer.fit` as a run uses it with `metrics.enabled=false` (loss, lr, global gradient norm,
  clipping, one metrics.jsonl row a step), compiled;
- normlab instrumented: the default `metrics` group (per-block and per-sublayer gradient norms every step;
  every `metrics.every` steps parameter norms, update ratios, activation RMS, attention and output logits;
  the embedding's effective rank every `every × rank_every` steps; gradient histograms every
  `every × histogram_every` steps, as a run with W&B computes them), spike detection, compiled;
- normlab eager: the instrumented side without torch.compile.

Every side sees random token ids (the compute per step does not depend on the text) and starts from its
own seeded init. The sides take turns in blocks of `--block-steps` steps (one round = one block of each,
the order rotating), the device synchronised at the ends of a block: a block's tokens/s includes its
share of the instrumented steps, the rows' host transfer (every train.flush_every steps) and nanoGPT's
per-step `loss.item()`. The first `--warmup-rounds` rounds compile and pass the dense start (every step up
to metrics.dense_until instrumented); the table is the median over the remaining blocks. The dense start is
a once-per-run cost, reported apart: (its blocks' time − the bare side's median block) summed.

MFU = tokens/s × FLOPs per token ÷ the device's peak (normlab.train.flops: 6·N + 12·L·T·d, bf16 dense
data-sheet peak), with N from normlab's GPT of the same shape, for every side.

`--breakdown` times the parts of an instrumented step alone on the instrumented side's model (CUDA events,
median of repeats): the probed forward + backward against the plain one, the embedding's effective rank,
the parameter snapshot and update ratios, the gradient histograms, the model-update forward.

`--device cpu` runs the same code on the CPU (a smoke test: `--shape tiny`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.bench.loop import MinimalLoop, load_nanogpt, nanogpt_loop
from normlab.config.compose import compose_config
from normlab.metrics.activations import LogitStats
from normlab.metrics.embedding import effective_rank
from normlab.metrics.histograms import layer_grad_histograms
from normlab.metrics.sinks import JsonlSink
from normlab.model.blocks import max_causal_logit
from normlab.train import flops
from normlab.train.loop import Trainer

# (d_model, blocks, heads, context, batch, vocabulary)
SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "gpt2": (768, 12, 12, 1024, 12, 50304),  # GPT-2 small, nanoGPT's default
    "small": (128, 6, 4, 128, 32, 4096),  # model=small: the CPU benchmarks' shape
    "tiny": (32, 2, 4, 32, 4, 512),  # a smoke test of the benchmark itself (tests/test_bench_scripts.py)
}
SIDES = ("nanogpt", "bare", "instrumented", "eager")
EXTRA_SIDES = ("bare-tuned", "instrumented-tuned")  # train.compile_mode=tuned, on request (--sides)
LABELS = {
    "bare-tuned": "normlab bare, compile_mode=tuned",
    "instrumented-tuned": "normlab instrumented, compile_mode=tuned",
    "nanogpt": "nanoGPT, compiled",
    "bare": "normlab bare (metrics.enabled=false), compiled",
    "instrumented": "normlab instrumented (default metrics), compiled",
    "eager": "normlab instrumented, eager",
}


def shape_overrides(shape: tuple[int, ...], device: str, precision: str) -> list[str]:
    d, n_layers, heads, context, batch, vocab = shape
    return [
        "norm=ln",
        "placement=pre",
        f"depth={n_layers}",
        f"model.d_model={d}",
        f"model.n_heads={heads}",
        f"model.context_length={context}",
        f"model.vocab_size={vocab}",
        "model.bias=false",
        "norm.bias=false",
        "model.dropout=0.0",
        f"train.batch_size={batch}",
        f"train.device={device}",
        f"train.precision={precision}",
        "logger=none",
    ]


@dataclass
class Side:
    """One side of the table: `run(steps)` trains that many steps and returns when the device is done."""

    name: str
    run: Callable[[int], None]
    trainer: Trainer | None = None


def normlab_side(
    name: str, overrides: list[str], tokens: np.ndarray, device: torch.device, out: Path, compiled: bool
) -> Side:
    changes = {
        "bare": ["metrics.enabled=false", f"train.compile={compiled}"],
        "instrumented": [f"train.compile={compiled}"],
        "eager": ["train.compile=false"],
        "bare-tuned": ["metrics.enabled=false", f"train.compile={compiled}", "train.compile_mode=tuned"],
        "instrumented-tuned": [f"train.compile={compiled}", "train.compile_mode=tuned"],
    }[name]
    cfg = compose_config([*overrides, *changes])
    c = OmegaConf.to_container(cfg, resolve=True)
    torch.manual_seed(c["seed"])
    model = instantiate(cfg.model).to(device)
    # a schedule long enough never to end inside the benchmark (no final evaluation)
    train = {**c["train"], "max_steps": 10**9, "eval_every": 0, "ckpt_every": 0}
    out.mkdir(parents=True)
    trainer = Trainer.from_config(
        c, model, tokens, tokens, device, reports_dir=out, train=train, histograms=not name.startswith("bare")
    )
    sink = JsonlSink(out / "metrics.jsonl")

    def run(steps: int) -> None:
        result = trainer.fit([sink], stop_at=trainer.step + steps)
        if result.status != "completed":
            raise SystemExit(f"normlab {name} diverged ({result.reason}); pick a stable configuration")

    return Side(name, run, trainer)


def nanogpt_side(
    path: Path,
    overrides: list[str],
    tokens: np.ndarray,
    device: torch.device,
    amp: torch.dtype | None,
    compiled: bool,
) -> Side:
    c = OmegaConf.to_container(compose_config(overrides), resolve=True)
    loop: MinimalLoop = nanogpt_loop(load_nanogpt(path), c, tokens, compiled, device, amp)
    return Side("nanogpt", lambda steps: loop.run(steps))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_time_ms(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median wall time of `fn` in ms, the device synchronised around each call."""
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def breakdown(trainer: Trainer, device: torch.device, repeats: int) -> dict[str, float]:
    """Milliseconds of each part of an instrumented step, alone (the instrumented side's trainer)."""
    instruments, head_loss = trainer.instruments, trainer.head_loss
    x, y = trainer.batch(trainer.train_tokens, torch.Generator().manual_seed(0))

    def forward_backward(probe: bool) -> Callable[[], None]:
        def step() -> None:
            with trainer.autocast():
                out = head_loss.step(x, y, probe)
            out[0].backward()
            trainer.optimizer.zero_grad(set_to_none=True)

        return step

    parts = {
        "plain forward + backward": forward_backward(False),
        "probed forward + backward": forward_backward(True),
        "embedding effective rank": lambda: effective_rank(instruments.embedding),
        "parameter norms and update ratios": lambda: (
            instruments.updates.before(),
            instruments.updates.param_norms(),
            instruments.updates.ratios(),
        ),
    }
    # the probed forward's own measurements, at the model's shapes (what the probed step adds to the plain one)
    model = trainer.model
    # the attention's head count, wherever the placement's block keeps its attention (a branch may wrap it)
    heads = next(m.n_heads for m in model.blocks[0].modules() if isinstance(getattr(m, "n_heads", None), int))
    t = x.shape[1]
    dtype = trainer.amp_dtype or torch.float32  # the scores' dtype under autocast
    q = torch.randn(x.shape[0], heads, t, model.d_model // heads, device=device, dtype=dtype)
    parts["attention max logits (every block)"] = lambda: [
        max_causal_logit(q, q) for _ in range(model.n_layers)
    ]
    with torch.no_grad(), trainer.autocast():
        hidden = model.features(x)
        logits = model.head(hidden)
    parts["logit statistics (materialised logits)"] = lambda: LogitStats.of(logits)
    grads = [torch.randn_like(p) for p in instruments.layout.params]
    parts["gradient histograms"] = lambda: layer_grad_histograms(
        instruments.layout, grads, instruments.cfg.histogram_bins
    )
    if instruments.model_update is not None:
        parts["model-update forward"] = instruments.model_update.measure
    return {name: cuda_time_ms(fn, device, repeats) for name, fn in parts.items()}


def dense_start_cost(
    block_s: list[float], steady_block_s: float, args: argparse.Namespace, overrides: list[str]
) -> dict[str, float]:
    """The dense start's once-per-run cost: the second block (steps block_steps … 2·block_steps − 1, every
    one instrumented, compiled by then) against a steady block (one instrumented step in block_steps) gives
    the extra time of an instrumented step; the dense start adds that many more instrumented steps than a
    steady stretch of the same length would have."""
    metrics = compose_config(overrides).metrics
    if args.warmup_rounds < 2 or args.block_steps > metrics.dense_until or args.block_steps != metrics.every:
        return {}
    extra_per_step = (block_s[1] - steady_block_s) / (args.block_steps - 1)
    extra_steps = (
        metrics.dense_until - metrics.dense_until // metrics.every
    )  # steps 1 … dense_until, less the
    return {  # ones instrumented anyway
        "instrumented_step_extra_ms": 1000 * extra_per_step,
        "dense_start_s": extra_per_step * extra_steps,
        "dense_start_steps": int(metrics.dense_until),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, default=None, help="a nanoGPT checkout (or its model.py)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shape", default="gpt2", choices=list(SHAPES))
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    p.add_argument(
        "--sides", default=",".join(SIDES), help=f"comma-separated, of {', '.join(SIDES + EXTRA_SIDES)}"
    )
    p.add_argument(
        "--block-steps", type=int, default=10, help="steps per block (a multiple of metrics.every)"
    )
    p.add_argument("--warmup-rounds", type=int, default=3, help="untimed rounds: compile, dense start")
    p.add_argument("--rounds", type=int, default=12, help="timed rounds after the warm-up")
    p.add_argument(
        "--no-compile", dest="compile", action="store_false", help="no torch.compile anywhere (smoke tests)"
    )
    p.add_argument("--breakdown", action="store_true", help="also time the parts of an instrumented step")
    p.add_argument("--repeats", type=int, default=20, help="repeats of each part in --breakdown")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the normlab sides, e.g. norm=rms")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a CUDA GPU; use --device cpu --shape small for a smoke test.")
    sides_asked = [s for s in args.sides.split(",") if s]
    if unknown := set(sides_asked) - set(SIDES + EXTRA_SIDES):
        raise SystemExit(
            f"--sides: {', '.join(sorted(unknown))} unknown; choose from {', '.join(SIDES + EXTRA_SIDES)}."
        )
    if "nanogpt" in sides_asked and args.nanogpt is None:
        raise SystemExit(
            "the nanogpt side needs --nanogpt PATH (a nanoGPT checkout); or leave it out of --sides."
        )
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # as a run does (normlab.train.run), and nanoGPT's TF32
    amp = {"bf16": torch.bfloat16, "fp32": None}[args.precision]
    shape = SHAPES[args.shape]
    overrides = [*shape_overrides(shape, args.device, args.precision), *args.overrides]
    d, n_layers, heads, context, batch, vocab = shape
    tokens = np.random.default_rng(0).integers(0, vocab, 4_000_000).astype(np.uint16)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = flops.peak_flops(device, args.precision)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        sides: dict[str, Side] = {}
        for side in sides_asked:
            if side == "nanogpt":
                sides[side] = nanogpt_side(args.nanogpt, overrides, tokens, device, amp, args.compile)
            else:
                sides[side] = normlab_side(side, overrides, tokens, device, Path(tmp) / side, args.compile)
        reference = next((s.trainer for s in sides.values() if s.trainer is not None), None)
        model = reference.model if reference else instantiate(compose_config(overrides).model)
        per_token = flops.flops_per_token(flops.matmul_params(model), n_layers, context, d)
        times: dict[str, list[float]] = {s: [] for s in sides}
        order = list(sides)
        for r in range(args.warmup_rounds + args.rounds):
            for side in order[r % len(order) :] + order[: r % len(order)]:
                synchronize(device)
                start = time.perf_counter()
                sides[side].run(args.block_steps)
                synchronize(device)
                times[side].append(time.perf_counter() - start)
            phase = "warm-up" if r < args.warmup_rounds else "timed"
            print(
                f"round {r + 1}/{args.warmup_rounds + args.rounds} ({phase}): "
                + ", ".join(f"{s} {1000 * t[-1] / args.block_steps:.1f} ms/step" for s, t in times.items()),
                flush=True,
            )
        parts = None
        if args.breakdown and sides.get("instrumented"):
            parts = breakdown(sides["instrumented"].trainer, device, args.repeats)
    tokens_per_block = args.block_steps * batch * context
    steady = {s: statistics.median(t[args.warmup_rounds :]) for s, t in times.items()}
    rows = {}
    for side, block_s in steady.items():
        tps = tokens_per_block / block_s
        rows[side] = {
            "tokens_per_s": tps,
            "vs_nanogpt": tps * steady["nanogpt"] / tokens_per_block if "nanogpt" in steady else None,
            "mfu": flops.mfu(tps, per_token, peak) if peak else None,
            "first_block_s": times[side][0],
        }
    result: dict[str, Any] = {
        "device": name,
        "torch": torch.__version__,
        "shape": dict(zip(("d_model", "blocks", "heads", "context", "batch", "vocab"), shape, strict=True)),
        "precision": args.precision,
        "compiled": args.compile,
        "overrides": overrides,
        "block_steps": args.block_steps,
        "warmup_rounds": args.warmup_rounds,
        "rounds": args.rounds,
        "sides": rows,
        "block_s": times,
        "wall_s": time.perf_counter() - started,
    }
    if "bare" in steady and "instrumented" in steady:
        result["overhead"] = steady["instrumented"] / steady["bare"] - 1
        result.update(dense_start_cost(times["instrumented"], steady["instrumented"], args, overrides))
    if parts is not None:
        result["breakdown_ms"] = parts
    print_table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


def print_table(result: dict[str, Any]) -> None:
    s = result["shape"]
    print(
        f"\n{result['device']}, torch {result['torch']}, {result['precision']}: d_model {s['d_model']}, "
        f"{s['blocks']} blocks, {s['heads']} heads, context {s['context']}, batch {s['batch']}, vocabulary "
        f"{s['vocab']}; median over {result['rounds']} blocks of {result['block_steps']} steps after "
        f"{result['warmup_rounds']} warm-up rounds ({result['wall_s']:.0f} s in all)"
    )
    print("| side | tokens/s | vs nanoGPT | MFU |\n|---|---|---|---|")
    for side, row in result["sides"].items():
        ratio = f"{row['vs_nanogpt']:.2f}" if row["vs_nanogpt"] is not None else "–"
        mfu = f"{100 * row['mfu']:.1f} %" if row["mfu"] is not None else "–"
        label = LABELS[side] if result["compiled"] else LABELS[side].replace(", compiled", "")
        print(f"| {label} | {row['tokens_per_s']:,.0f} | {ratio} | {mfu} |")
    if "overhead" in result:
        print(
            f"instrumentation overhead in steady state: {100 * result['overhead']:+.1f} % (instrumented / bare)"
        )
    if "dense_start_s" in result:
        print(
            f"an instrumented step costs {result['instrumented_step_extra_ms']:.1f} ms more than a plain one; the "
            f"dense start (every step up to {result['dense_start_steps']} instrumented) adds "
            f"{result['dense_start_s']:.2f} s once per run"
        )
    if "breakdown_ms" in result:
        print("an instrumented step's parts, alone (median ms):")
        for part, ms in result["breakdown_ms"].items():
            print(f"  {part}: {ms:.2f} ms")
