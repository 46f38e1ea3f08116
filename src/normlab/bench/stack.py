"""Many small runs on one device: one sweep trained one run at a time, as parallel processes
(`hydra/launcher=joblib`) and stacked (`hydra/launcher=stacked`), each as a user runs it.

    python scripts/bench_stack.py                       # CPU: 4 seeds of model=tiny, 200 steps
    python scripts/bench_stack.py --device cuda         # GPU: 32 seeds of model=small, probes on
    python scripts/bench_stack.py --host                # host work per step: normlab.bench.stack_host
    python scripts/bench_stack.py --profile --device cuda   # where a stacked step's time goes: .stack_profile

Every mode is the real command, `python -m normlab -m seed=0,…,S-1 … hydra/launcher=…` (one-at-a-time is
`hydra/launcher=basic` over the first `--alone-runs` jobs of the same sweep), with the default metrics
(probes on). What is measured, per sweep:

- wall: the sweep's wall time, start-up, data, compilation and evaluation included;
- tokens/s summed: the training throughput of the device while the sweep trains, from the runs' own
  `tokens_per_s` (summary.json: steady state, the first flush window left out): for the stacked launcher
  the members' sum (each member reports its share of the stack's step), for joblib the mean run's times
  the runs at once, for one-at-a-time one run's;
- vs one alone: that sum over one-at-a-time's.

The modes (`--modes`: alone, joblib, stacked, and `compiled`, one stack with train.compile as
`--compile-mode` says) run in A B … | … B A blocks (`--repeats` of them), and each number is the median
over blocks: a machine shared with other work slows every mode alike within a block. The machine's load
average is printed with each block, and the table so far after each mode (a run cut off by its time limit
keeps what it measured); a mode that fails or takes longer than `--mode-timeout` is reported as such and
the others go on. With `--device cpu` the same code path runs on the CPU (the GPU mode's sweep sizes
can be tried there with `--members`, `--model`).

`--in-process` measures the work instead, where a busy machine makes wall times meaningless: in one process
on one torch thread, the sweep's runs trained one after another by the single-run Trainer against the same
runs as one StackedTrainer, steady steps only (past the dense start, instrumented every `metrics.every`
steps, rows moved to the host every `train.flush_every`), in A B | B A blocks of `--block-steps` steps
timed by this process's CPU time. Its ratio is what one core gives stacked against alone, which is what
`hydra/launcher=stacked hydra.launcher.n_jobs=C` (one thread per stack) against `joblib` on C cores comes
to, start-up aside.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULTS = {  # device → (model, members, steps, batch, joblib's n_jobs, one-at-a-time runs)
    "cpu": ("tiny", 4, 200, 16, 2, 4),
    "cuda": ("small", 32, 300, 32, 8, 2),
}


@dataclass(frozen=True)
class Mode:
    name: str
    launcher: str
    n_jobs: int
    runs: int  # jobs of the sweep this mode trains
    extra: tuple[str, ...] = ()  # overrides of this mode alone (the compiled stack's)


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return float("nan")


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"cpu ({cores} cores)"


def sweep_command(args: argparse.Namespace, mode: Mode, sweep_dir: Path) -> list[str]:
    seeds = ",".join(str(s) for s in range(mode.runs))
    command = [
        sys.executable,
        "-m",
        "normlab",
        "-m",
        f"seed={seeds}",
        f"model={args.model}",
        "data=synthetic",
        "logger=none",
        f"train.device={args.device}",
        f"train.max_steps={args.steps}",
        f"train.batch_size={args.batch}",
        "train.eval_every=0",
        "train.eval_batches=2",
        "train.sample_tokens=0",
        "train.progress=false",
        f"hydra/launcher={mode.launcher}",
        f"hydra.sweep.dir={sweep_dir}",
        *args.overrides,
        *mode.extra,
    ]
    if mode.launcher in ("joblib", "stacked"):
        command.append(f"hydra.launcher.n_jobs={mode.n_jobs}")
    if mode.launcher == "stacked":
        command.append(f"hydra.launcher.max_stack={args.max_stack}")
    return command


def run_mode(args: argparse.Namespace, mode: Mode, workdir: Path, block: int) -> dict[str, Any]:
    """One sweep of `mode`: its wall time and summed tokens/s, or why it has none (`failed`: it failed, did
    not finish within --mode-timeout, or not every run completed)."""
    sweep_dir = (
        workdir / f"{re.sub(r'[^A-Za-z0-9]+', '_', mode.name)}-{block}"
    )  # a name Hydra reads as a value
    env = {**os.environ, "WANDB_MODE": "disabled"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            sweep_command(args, mode, sweep_dir),
            env=env,
            capture_output=True,
            text=True,
            timeout=args.mode_timeout,
        )
    except subprocess.TimeoutExpired:
        return {
            "wall_s": time.perf_counter() - start,
            "failed": f"not finished within {args.mode_timeout:g} s",
        }
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"wall_s": wall, "failed": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    if len(summaries) != mode.runs or any(s["status"] != "completed" for s in summaries):
        return {"wall_s": wall, "failed": f"not every run completed in {sweep_dir}"}
    per_run = [float(s["tokens_per_s"]) for s in summaries]
    if mode.launcher == "stacked":
        summed = sum(per_run)
    elif mode.launcher == "joblib":
        summed = statistics.mean(per_run) * min(mode.n_jobs, mode.runs)
    else:
        summed = statistics.mean(per_run)
    return {"wall_s": wall, "tokens_per_s": summed, "runs": mode.runs}


def sweep_table(modes: list[Mode], results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each mode that has run: median wall and tokens/s over its blocks, and the ratio to the first mode's."""
    table = []
    first = [r["tokens_per_s"] for r in results[modes[0].name] if "tokens_per_s" in r]
    base = statistics.median(first) if first else None
    for mode in modes:
        done = results[mode.name]
        if not done:
            continue
        good = [r for r in done if "tokens_per_s" in r]
        row: dict[str, Any] = {
            "mode": mode.name,
            "runs": mode.runs,
            "wall_s": statistics.median(r["wall_s"] for r in done),
        }
        if good:
            row["tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in good)
            row["ratio"] = row["tokens_per_s"] / base if base else None
        else:
            row["failed"] = done[-1]["failed"]
        table.append(row)
    return table


def print_table(title: str, table: list[dict[str, Any]]) -> None:
    print(
        f"\n{title}\n| mode | runs | wall (s) | tokens/s summed | vs one alone |\n|---|---|---|---|---|",
        flush=True,
    )
    for row in table:
        if "failed" in row:
            print(
                f"| {row['mode']} | {row['runs']} | {row['wall_s']:.1f} | — ({row['failed']}) | — |",
                flush=True,
            )
        else:
            ratio = f"{row['ratio']:.2f}×" if row.get("ratio") else "—"
            print(
                f"| {row['mode']} | {row['runs']} | {row['wall_s']:.1f} | {row['tokens_per_s']:,.0f} | {ratio} |",
                flush=True,
            )


def in_process(args: argparse.Namespace) -> dict[str, Any]:
    """Tokens per CPU-second of the runs trained alone vs stacked, one thread (see the module docstring)."""
    import numpy as np
    import torch
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from normlab.config import checked
    from normlab.config.compose import compose_config
    from normlab.train.build import run_corpus
    from normlab.train.loop import Trainer
    from normlab.train.stacked.trainer import StackedTrainer

    torch.set_num_threads(1)
    overrides = [
        f"model={args.model}",
        "data=synthetic",
        "logger=none",
        f"train.batch_size={args.batch}",
        "train.device=cpu",
        f"train.max_steps={10**6}",
        *args.overrides,
    ]
    cfgs = [checked(OmegaConf.create(compose_config([*overrides, f"seed={s}"]))) for s in range(args.members)]
    corpus = run_corpus(cfgs[0], progress=False)
    device = torch.device("cpu")

    def model(cfg: dict) -> torch.nn.Module:
        torch.manual_seed(cfg["seed"])
        return instantiate(cfg["model"])

    alone = [Trainer.from_config(c, model(c), corpus.train, corpus.val, device) for c in cfgs]
    stacked = StackedTrainer([model(c) for c in cfgs], cfgs, corpus.train, corpus.val, device)
    start = cfgs[0]["metrics"]["dense_until"] + 1
    flush = cfgs[0]["train"]["flush_every"]
    tokens = cfgs[0]["train"]["batch_size"] * cfgs[0]["train"]["seq_len"]

    def steps(trainer: Any, first: int, n: int) -> None:
        pending = []
        for s in range(first, first + n):
            trainer.step = s
            probe = trainer.instruments.begin(s) if trainer.instruments else None
            pending.append(trainer.train_step(True, probe))
            if probe is not None:
                probe.host_rows() if hasattr(probe, "host_rows") else probe.row()
            if len(pending) >= flush:
                torch.stack(pending).tolist()
                pending = []

    def timed(side: str, first: int) -> float:
        begin = time.process_time()
        if side == "alone":
            for trainer in alone:
                steps(trainer, first, args.block_steps)
        else:
            steps(stacked, first, args.block_steps)
        return time.process_time() - begin

    steps(stacked, start, 2)  # first calls (allocations) out of the timing
    for trainer in alone:
        steps(trainer, start, 2)
    ratios, rates = [], {"alone": [], "stacked": []}
    first = start + 2
    for block in range(args.repeats):
        order = ("alone", "stacked") if block % 2 == 0 else ("stacked", "alone")
        took = {}
        for side in order:
            took[side] = timed(side, first)
            first += args.block_steps
        work = args.members * args.block_steps * tokens
        for side in took:
            rates[side].append(work / took[side])
        ratios.append(took["alone"] / took["stacked"])
        print(
            f"  block {block}: alone {work / took['alone']:,.0f}, stacked {work / took['stacked']:,.0f} tokens per "
            f"CPU-second: {ratios[-1]:.2f}× (load {load_average()})",
            flush=True,
        )
    out = {
        "alone_tokens_per_cpu_s": float(np.median(rates["alone"])),
        "stacked_tokens_per_cpu_s": float(np.median(rates["stacked"])),
        "ratio": float(np.median(ratios)),
        "ratio_range": [min(ratios), max(ratios)],
    }
    print(
        f"\none thread, CPU time, {args.members} runs of model={args.model}, batch {args.batch}: stacked "
        f"{out['ratio']:.2f}× alone (blocks {min(ratios):.2f}-{max(ratios):.2f}): "
        f"{out['stacked_tokens_per_cpu_s']:,.0f} vs {out['alone_tokens_per_cpu_s']:,.0f} tokens per CPU-second"
    )
    return out


def run_host(args: argparse.Namespace) -> dict[str, Any]:
    """`--host`: normlab.bench.stack_host's table, printed and (with --json) written."""
    from normlab.bench.stack_host import host, table

    sizes = [int(n) for n in str(args.members or "1,8,32").split(",")]
    heads = [h for h in args.heads.split(",") if h]
    print(
        f"{device_name('cpu')}: a run alone vs stacks of {sizes}, heads {heads}, load {load_average()}",
        flush=True,
    )
    out = host(sizes, heads, args.blocks, args.block_steps, args.overrides)
    out.update(machine=device_name("cpu"), load_avg=load_average())
    print(table(out, out["machine"], out["load_avg"]))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--model", default=None, help="model preset (default: tiny on cpu, small on cuda)")
    p.add_argument(
        "--members", default=None, help="runs in the sweep (seeds); with --host, stack sizes, e.g. 1,8,32"
    )
    p.add_argument("--steps", type=int, default=None, help="train.max_steps of each run")
    p.add_argument("--batch", type=int, default=None, help="train.batch_size")
    p.add_argument("--joblib-jobs", type=int, default=None, help="hydra.launcher.n_jobs of the joblib mode")
    p.add_argument(
        "--stacked-jobs",
        default="1",
        help="comma-separated hydra.launcher.n_jobs of the stacked modes (stacks at once), e.g. 1,2",
    )
    p.add_argument("--max-stack", type=int, default=32, help="hydra.launcher.max_stack")
    p.add_argument(
        "--modes",
        default="alone,joblib,stacked",
        help="the sweeps to time, in order: alone, joblib, stacked, compiled (one stack with train.compile)",
    )
    p.add_argument(
        "--compile-mode",
        default="reduce-overhead",
        help="train.compile_mode of the `compiled` mode (reduce-overhead: CUDA graphs on a GPU)",
    )
    p.add_argument(
        "--mode-timeout",
        type=float,
        default=None,
        help="seconds a mode's sweep may take; then it is reported as not finished",
    )
    p.add_argument("--alone-runs", type=int, default=None, help="jobs one-at-a-time trains (of the sweep)")
    p.add_argument("--repeats", type=int, default=1, help="blocks of every mode (A B … | … B A)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument(
        "--in-process",
        action="store_true",
        help="CPU time on one thread: alone vs stacked in one process (for a busy machine; see above)",
    )
    p.add_argument("--block-steps", type=int, default=20, help="--in-process, --host: steps a block times")
    p.add_argument(
        "--host",
        action="store_true",
        help="CPU time per step at a shape of negligible arithmetic: a run alone vs stacks of --members "
        "(default 1,8,32), both head paths (normlab.bench.stack_host)",
    )
    p.add_argument("--blocks", type=int, default=6, help="--host: blocks of every configuration")
    p.add_argument("--heads", default="fused,plain", help="--host: head paths, fused and/or plain")
    p.add_argument(
        "--profile",
        action="store_true",
        help="torch.profiler of a stack of --members (default 32) × --model (small), --batch (32) against a run "
        "alone: steady and probed steps, top kernels / operators (normlab.bench.stack_profile)",
    )
    p.add_argument("--head", default="auto", help="--profile: fused, plain or auto (the device's)")
    p.add_argument("--profile-steps", type=int, default=3, help="--profile: steps of each kind profiled")
    p.add_argument("--top", type=int, default=25, help="--profile: kernels / operators listed per kind")
    p.add_argument("--out", type=Path, default=None, help="--profile: write the tables to OUT/profile.md")
    p.add_argument("overrides", nargs="*", help="more Hydra overrides for every run")
    args = p.parse_args(argv)
    if args.host:
        return run_host(args)
    if args.profile:
        from normlab.bench.stack_profile import from_args

        return from_args(args, DEFAULTS["cuda"])
    model, members, steps, batch, joblib_jobs, alone_runs = DEFAULTS[args.device]
    args.model = args.model or model
    args.members = int(args.members or members)
    args.steps = args.steps or steps
    args.batch = args.batch or batch
    args.joblib_jobs = args.joblib_jobs or joblib_jobs
    alone = min(args.alone_runs or alone_runs, args.members)
    if args.in_process:
        out = in_process(args)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
        return out
    modes = sweep_modes(args, alone)
    name = device_name(args.device)
    print(
        f"{name}: {args.members} runs of model={args.model}, {args.steps} steps, batch {args.batch}; "
        f"modes: {', '.join(m.name for m in modes)}",
        flush=True,
    )
    title = f"{name}, model={args.model}, {args.members} runs × {args.steps} steps, batch {args.batch}"
    results: dict[str, list[dict[str, Any]]] = {m.name: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="normlab-bench-stack-") as tmp:
        workdir = Path(tmp)
        # the token cache, built once before anything is timed
        warm = Mode("warm-up", "basic", 1, 1)
        subprocess.run(
            [*sweep_command(args, warm, workdir / "warm"), "train.max_steps=1"],
            env={**os.environ, "WANDB_MODE": "disabled"},
            capture_output=True,
        )
        for block in range(args.repeats):
            order = modes if block % 2 == 0 else list(reversed(modes))
            for mode in order:
                found = run_mode(args, mode, workdir, block)
                found["load_avg"] = load_average()
                results[mode.name].append(found)
                said = found.get("failed") or f"{found['tokens_per_s']:,.0f} tokens/s"
                print(
                    f"  block {block}: {mode.name}: {found['wall_s']:.1f} s, {said} (load {found['load_avg']})",
                    flush=True,
                )
                print_table(title, sweep_table(modes, results))  # the table so far: a cut-off run keeps it
    table = sweep_table(modes, results)
    out = {
        "device": name,
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "table": table,
        "blocks": results,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return out


def sweep_modes(args: argparse.Namespace, alone: int) -> list[Mode]:
    """The sweeps --modes names: `alone` (one at a time, `alone` runs), `joblib` (--joblib-jobs processes),
    `stacked` (one per --stacked-jobs value), `compiled` (one stack, train.compile with --compile-mode)."""
    modes = []
    for key in args.modes.split(","):
        if key == "alone":
            modes.append(Mode("one at a time", "basic", 1, alone))
        elif key == "joblib":
            modes.append(Mode(f"joblib n_jobs={args.joblib_jobs}", "joblib", args.joblib_jobs, args.members))
        elif key == "stacked":
            modes += [
                Mode(f"stacked n_jobs={k}", "stacked", int(k), args.members)
                for k in str(args.stacked_jobs).split(",")
            ]
        elif key == "compiled":
            extra = ("train.compile=true", f"train.compile_mode={args.compile_mode}")
            modes.append(Mode(f"stacked compiled ({args.compile_mode})", "stacked", 1, args.members, extra))
        else:
            raise SystemExit(f"--modes takes alone, joblib, stacked and compiled, not {key}")
    return modes
