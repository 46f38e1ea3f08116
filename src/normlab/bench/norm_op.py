"""One norm's forward + backward on the CPU: normlab's RMSNorm against LayerNorm, alone, at given shapes.

    python scripts/bench_norm_op.py                                # the default and the tiny preset's shapes
    python scripts/bench_norm_op.py --shape 32x128x128 --threads 2

Both norms are built as a run builds them (`build_norm` with `rms` / `ln` and their YAML settings). For
each shape, timed blocks of `--reps` forward + backward calls alternate A B | B A | …; each block pair gives
a ratio (RMSNorm time / LayerNorm time, < 1 = RMSNorm faster) and the result is the median over pairs.
Where a step goes as a whole is `python -m normlab.bench.profile_norm`; this isolates the norm itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from normlab.model.norms import build_norm

DEFAULT_SHAPES = ("32x128x128", "16x64x64")  # model=small at batch 32 × 128; the rmsnorm_speed preset


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = tuple(int(p) for p in text.lower().split("x"))
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not BATCHxTOKENSxWIDTH, e.g. 32x128x128")
    return parts  # type: ignore[return-value]


def time_block(norm: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        norm(x).backward(grad)
    return (time.perf_counter() - start) / reps


def measure(shape: tuple[int, int, int], blocks: int, reps: int) -> dict[str, Any]:
    width = shape[-1]
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    norms = {name: build_norm(width, {"name": name}, context_length=shape[1]) for name in ("rms", "ln")}
    for norm in norms.values():  # warm-up: allocator, first-call dispatch
        time_block(norm, x, grad, reps)
    times: dict[str, list[float]] = {"rms": [], "ln": []}
    ratios = []
    for block in range(blocks):
        order = ("rms", "ln") if block % 2 == 0 else ("ln", "rms")
        pair = {name: time_block(norms[name], x, grad, reps) for name in order}
        for name, t in pair.items():
            times[name].append(t)
        ratios.append(pair["rms"] / pair["ln"])
    return {
        "shape": list(shape),
        "rms_us": statistics.median(times["rms"]) * 1e6,
        "ln_us": statistics.median(times["ln"]) * 1e6,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=parse_shape, action="append", help="BATCHxTOKENSxWIDTH (repeatable)")
    p.add_argument("--blocks", type=int, default=8, help="timed block pairs per shape (default 8)")
    p.add_argument("--reps", type=int, default=100, help="forward + backward calls per block (default 100)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    shapes = args.shape or [parse_shape(s) for s in DEFAULT_SHAPES]
    results = [measure(shape, args.blocks, args.reps) for shape in shapes]
    for r in results:
        shape = "x".join(map(str, r["shape"]))
        print(
            f"{shape}: RMSNorm {r['rms_us']:.0f} us, LayerNorm {r['ln_us']:.0f} us per forward + backward; "
            f"ratio {r['ratio']:.3f} (median of {args.blocks} block pairs; {r['ratio_min']:.3f}–"
            f"{r['ratio_max']:.3f}; < 1 means RMSNorm is faster), {args.threads} thread(s)"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
