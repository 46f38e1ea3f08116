"""Cost of the instrumentation: training steps/s with metrics on vs off, in one process.

    python scripts/bench_overhead.py                      # norm=ln placement=pre depth=6, model=small
    python scripts/bench_overhead.py --blocks 4 --block-steps 10 model=tiny depth=2   # a quick look

Two trainers with the same config and the same initial weights train side by side: "on" is the default
`metrics` config (per-layer and per-sublayer gradient norms every step, the instrumented steps every
`metrics.every`, gradient histograms every `metrics.every × metrics.histogram_every`, spike detection
with its forensics history); "off" is `metrics.enabled=false` (loss, global grad norm, clipping) with
no spike detection. Both write metrics.jsonl to a temporary directory; W&B is not involved.

Timing runs in blocks of `--block-steps` steps (a multiple of metrics.every, so every "on" block holds
its share of instrumented steps), alternating on/off and swapping the order every block (ABBA), so slow
drifts in machine speed (thermal, other processes) hit both sides equally. Tokens are random ids: the
compute per step is the same as on real text. Prints per-block times and the overhead ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from normlab.metrics.monitor import Monitor  # noqa: E402
from normlab.metrics.sinks import JsonlSink  # noqa: E402
from normlab.metrics.spikes import SpikeConfig  # noqa: E402
from normlab.train.loop import Trainer  # noqa: E402

DEFAULT_OVERRIDES = ["norm=ln", "placement=pre", "depth=6", "logger=none"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=8, help="timed blocks per side (default 8)")
    p.add_argument("--block-steps", type=int, default=20, help="steps per block (default 20)")
    p.add_argument("--warmup-steps", type=int, default=10, help="untimed steps per side first (default 10)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. norm=rms depth=12 model=tiny")
    return p.parse_args(argv)


def compose_cfg(overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=[*DEFAULT_OVERRIDES, *overrides])
    return cfg


def make_trainer(cfg: Any, tokens: np.ndarray, metrics_on: bool, out_dir: Path) -> Trainer:
    c = OmegaConf.to_container(cfg, resolve=True)
    torch.manual_seed(c["seed"])  # both sides start from the same weights
    model = instantiate(cfg.model)
    # a schedule long enough that the benchmark never reaches its end (no final evaluation)
    train = {**c["train"], "max_steps": 10**9, "eval_every": 0, "ckpt_every": 0}
    if metrics_on:
        metrics = c["metrics"]
        monitor = Monitor(SpikeConfig(**c["spikes"]), out_dir=out_dir, n_layers=model.n_layers)
    else:
        metrics = {**c["metrics"], "enabled": False}
        monitor = Monitor(SpikeConfig(window=0, history=0), out_dir=None, n_layers=model.n_layers)
    return Trainer(
        model,
        tokens,
        tokens,
        train,
        c["optim"],
        c["schedule"]["name"],
        c["warmup_steps"],
        c["seed"],
        torch.device("cpu"),
        metrics=metrics,
        monitor=monitor,
    )


def run_block(trainer: Trainer, sink: JsonlSink, steps: int) -> float:
    start = time.perf_counter()
    result = trainer.fit(sink.log, on_checkpoint=lambda: None, stop_at=trainer.step + steps)
    elapsed = time.perf_counter() - start
    if result.status != "completed":
        raise SystemExit(f"the benchmark run diverged ({result.reason}); pick a stable configuration")
    return elapsed


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose_cfg(args.overrides)
    every = cfg.metrics.every
    if every and args.block_steps % every:
        raise SystemExit(f"--block-steps={args.block_steps} must be a multiple of metrics.every={every}")
    vocab = cfg.model.vocab_size
    tokens = np.random.default_rng(0).integers(0, vocab, 2_000_000).astype(np.uint16)
    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        for name, on in (("on", True), ("off", False)):
            out = Path(tmp) / name
            out.mkdir()
            sides[name] = (make_trainer(cfg, tokens, on, out), JsonlSink(out / "metrics.jsonl"))
        for trainer, sink in sides.values():
            run_block(trainer, sink, args.warmup_steps)
        times: dict[str, list[float]] = {"on": [], "off": []}
        for b in range(args.blocks):
            order = ("on", "off") if b % 2 == 0 else ("off", "on")
            for name in order:
                times[name].append(run_block(*sides[name], args.block_steps))
            print(
                f"block {b + 1}/{args.blocks}: on {times['on'][-1]:.2f} s, off {times['off'][-1]:.2f} s "
                f"({args.block_steps} steps each)",
                flush=True,
            )
        for _, sink in sides.values():
            sink.close()
    steps = args.blocks * args.block_steps
    on_sps, off_sps = steps / sum(times["on"]), steps / sum(times["off"])
    paired = [on / off for on, off in zip(times["on"], times["off"], strict=True)]
    result = {
        "config": " ".join([*DEFAULT_OVERRIDES, *args.overrides]),
        "threads": torch.get_num_threads(),
        "steps_per_side": steps,
        "steps_per_s_on": on_sps,
        "steps_per_s_off": off_sps,
        "time_ratio_on_over_off": off_sps / on_sps,
        "overhead_pct": 100 * (off_sps / on_sps - 1),
        "median_block_ratio": statistics.median(paired),
        "block_times_on": times["on"],
        "block_times_off": times["off"],
    }
    print(
        f"metrics on: {on_sps:.3f} steps/s, off: {off_sps:.3f} steps/s "
        f"({steps} steps each, {result['threads']} threads, {result['config']})"
    )
    print(
        f"ratio (time on / time off): {result['time_ratio_on_over_off']:.4f} -> overhead "
        f"{result['overhead_pct']:+.2f}% (median of block ratios {result['median_block_ratio']:.4f})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
