"""Cost of the instrumentation: training steps/s with metrics on vs off, in one process.

    python scripts/bench_overhead.py                                 # norm=ln placement=pre depth=6
    python scripts/bench_overhead.py --steps 40 model=tiny depth=2   # a quick look

Two trainers with the same config and the same initial weights train side by side: "on" is the default
`metrics` config (per-layer and per-sublayer gradient norms every step, the instrumented steps every
`metrics.every`, gradient histograms every `metrics.every × metrics.histogram_every`, spike detection
with its forensics history); "off" is `metrics.enabled=false` (loss, global grad norm, clipping) with
no spike detection. Both write metrics.jsonl to a temporary directory; W&B is not involved.

The sides alternate step by step, swapping which goes first at every step (on-off, off-on, …), so both
see the same machine: a burst of load from another process lands on an on-step and its neighbouring
off-step alike. Each step is timed in wall time. Reported:
- the plain ratio of total wall time, on / off (steps/s off / steps/s on);
- a robust ratio for shared machines, from paired differences: each on-step minus the off-step run
  next to it (which shares its machine state), the median difference per kind of on-step (plain,
  instrumented, histogram) weighted by how often that kind occurs, over the median off-step time:
  1 + Σ share(kind) · median(on − off | kind) / median(off). Medians ignore the bursts that make
  plain sums noisy.
Tokens are random ids: the compute per step is the same as on real text.
"""

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from normlab.bench.clock import CLOCKS, add_clock_argument
from normlab.config.compose import compose_config
from normlab.metrics.instruments import InstrumentConfig
from normlab.metrics.sinks import JsonlSink
from normlab.train.loop import Trainer

DEFAULT_OVERRIDES = ["norm=ln", "placement=pre", "depth=6", "logger=none"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="timed steps per side (default 200)")
    p.add_argument("--warmup-steps", type=int, default=10, help="untimed steps per side first (default 10)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    add_clock_argument(p)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. norm=rms depth=12 model=tiny")
    return p.parse_args(argv)


def compose_cfg(overrides: list[str]) -> Any:
    return compose_config([*DEFAULT_OVERRIDES, *overrides])


def make_trainer(cfg: Any, tokens: np.ndarray, metrics_on: bool, out_dir: Path) -> Trainer:
    c = OmegaConf.to_container(cfg, resolve=True)
    torch.manual_seed(c["seed"])  # both sides start from the same weights
    model = instantiate(cfg.model)
    # a schedule long enough that the benchmark never reaches its end (no final evaluation)
    train = {**c["train"], "max_steps": 10**9, "eval_every": 0, "ckpt_every": 0}
    if metrics_on:
        return Trainer.from_config(
            c, model, tokens, tokens, torch.device("cpu"), reports_dir=out_dir, train=train
        )
    # the bare loop: no instruments, no spike detector, no reports
    metrics = {**c["metrics"], "enabled": False}
    spikes = {**c["spikes"], "window": 0, "history": 0}
    return Trainer.from_config(
        c, model, tokens, tokens, torch.device("cpu"), train=train, metrics=metrics, spikes=spikes
    )


def run_steps(trainer: Trainer, sink: JsonlSink, steps: int, clock=time.perf_counter) -> float:
    """Seconds (wall, or `clock`'s) for `steps` training steps (rows flushed at the end, as a pause of
    `fit` does)."""
    start = clock()
    result = trainer.fit([sink], stop_at=trainer.step + steps)
    elapsed = clock() - start
    if result.status != "completed":
        raise SystemExit(f"the benchmark run diverged ({result.reason}); pick a stable configuration")
    return elapsed


def step_kind(step: int, metrics: InstrumentConfig | Mapping[str, Any]) -> str:
    """What the "on" side does at this step, by the trainer's own rule (`InstrumentConfig`): plain,
    instrumented, or instrumented with histograms."""
    metrics = InstrumentConfig.of(metrics)
    if metrics.histogram(step):
        return "histogram"
    return "instrumented" if metrics.instrumented(step) else "plain"


def robust_ratio(extra: dict[str, list[float]], off: list[float]) -> float:
    """1 + Σ_kind share(kind) · median(on − off differences of that kind) / median(off-steps)."""
    n = sum(len(v) for v in extra.values())
    expected_extra = sum(len(v) / n * statistics.median(v) for v in extra.values() if v)
    return 1 + expected_extra / statistics.median(off)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = compose_cfg(args.overrides)
    tokens = np.random.default_rng(0).integers(0, cfg.model.vocab_size, 2_000_000).astype(np.uint16)
    clock = CLOCKS[args.clock]
    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        for name, on in (("on", True), ("off", False)):
            out = Path(tmp) / name
            out.mkdir()
            sides[name] = (make_trainer(cfg, tokens, on, out), JsonlSink(out / "metrics.jsonl"))
        for trainer, sink in sides.values():
            run_steps(trainer, sink, args.warmup_steps)
        extra_by_kind: dict[str, list[float]] = {"plain": [], "instrumented": [], "histogram": []}
        on_all: list[float] = []
        off_all: list[float] = []
        metrics = InstrumentConfig.from_config(cfg.metrics)
        for k in range(args.steps):
            kind = step_kind(sides["on"][0].step, metrics)
            for name in ("on", "off") if k % 2 == 0 else ("off", "on"):
                elapsed = run_steps(*sides[name], 1, clock)
                (on_all if name == "on" else off_all).append(elapsed)
            extra_by_kind[kind].append(on_all[-1] - off_all[-1])
            if (k + 1) % 20 == 0:
                print(
                    f"{k + 1}/{args.steps} steps per side: on {sum(on_all):.1f} s, off {sum(off_all):.1f} s",
                    flush=True,
                )
        for _, sink in sides.values():
            sink.close()
    medians = {kind: statistics.median(v) for kind, v in extra_by_kind.items() if v}
    result = {
        "config": " ".join([*DEFAULT_OVERRIDES, *args.overrides]),
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "steps_per_side": args.steps,
        "steps_per_s_on": args.steps / sum(on_all),
        "steps_per_s_off": args.steps / sum(off_all),
        "wall_ratio": sum(on_all) / sum(off_all),
        "robust_ratio": robust_ratio(extra_by_kind, off_all),
        "median_step_s_off": statistics.median(off_all),
        "median_extra_s_on": medians,
        "on_steps_by_kind": {kind: len(v) for kind, v in extra_by_kind.items()},
        "step_s_on": on_all,
        "step_s_off": off_all,
    }
    print(
        f"metrics on: {result['steps_per_s_on']:.3f} steps/s, off: {result['steps_per_s_off']:.3f} steps/s "
        f"({args.steps} steps each side, {result['threads']} threads, {result['config']})"
    )
    off_med = result["median_step_s_off"]
    kinds = ", ".join(f"{kind} {1000 * m:+.1f} ms ×{len(extra_by_kind[kind])}" for kind, m in medians.items())
    print(f"median off-step {1000 * off_med:.1f} ms; median extra time of an on-step: {kinds}")
    print(
        f"ratio (time on / time off): {result['wall_ratio']:.4f} ({100 * (result['wall_ratio'] - 1):+.2f}%) "
        f"from total wall time; robust {result['robust_ratio']:.4f} "
        f"({100 * (result['robust_ratio'] - 1):+.2f}%) from paired per-kind medians"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
