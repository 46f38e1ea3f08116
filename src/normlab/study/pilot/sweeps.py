"""The pilot's sweeps: which presets (configs/experiment/findings/pilot/), placements and seeds serve which
findings; the settings every run gets (device, shape, packing); the shape's cost and parameters; and the
sweeps launched at once, each a `python -m normlab -m +experiment=…` process of its own, as
`scripts/reproduce.py` runs a preset.

Findings 12 and 13 follow one recipe and differ only in the placement beside Pre-LN, so when both are
asked for they share one sweep (findings/pilot/depth) and its Pre-LN runs; each is then evaluated on its
own placements.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from normlab.study.pilot.figures import (
    CPU,
    PACKINGS,
    PROCESSES,
    STACKED,
    Figures,
    Shape,
    cpu_step_s,
    evaluation_s,
)
from normlab.study.pilot.plan import SweepCost, SweepPlan
from normlab.study.sweep_signals import Forward

GROUP = "findings/pilot"
REQUIRED = ("lnscale_depth", "mixln_depth")  # the pilot is for these (issue 38)
OPTIONAL = ("periln_act_growth",)  # joins when the budget fits it beside them at the full horizon
PILOT_FINDINGS = REQUIRED + OPTIONAL
SHARED = {"depth": REQUIRED}  # one sweep trains the runs of both (findings/pilot/depth.yaml)

# a tiny shape, for the smoke on the GPU and the CPU test: the whole path in seconds
MICRO = (
    "model.d_model=32",
    "model.n_heads=2",
    "model.context_length=32",
    "train.batch_size=8",
    "train.eval_batches=2",
    "data.vocab_size=512",
    "data.n_train_stories=1000",
    "data.n_val_stories=100",
    "data.tokenizer_train_stories=1000",
)


def device_overrides(device: str) -> list[str]:
    """bf16 and torch.compile on a GPU (the presets'); fp32 and eager on a CPU."""
    if device == "cpu":
        return ["train.device=cpu", "train.precision=fp32", "train.compile=false"]
    return [f"train.device={device}"]


def data_overrides(data_path: str | None) -> list[str]:
    """TinyStories from a local copy, at about the embedded corpus's size; the embedded corpus otherwise."""
    if not data_path:
        return []
    return [
        "data=tinystories",
        f"data.path={data_path}",
        "~data.n_train_stories",
        "data.max_train_stories=200000",
        "data.max_val_stories=5000",
    ]


def _compose(preset: str, overrides: Sequence[str] = ()):
    from normlab.config.compose import compose_config

    return compose_config([f"+experiment={preset}", *overrides], hydra=True)


def _swept(cfg, key: str) -> list[str]:
    from omegaconf import OmegaConf

    params = OmegaConf.to_container(cfg.hydra.sweeper.params) or {}
    return [v.strip() for v in str(params.get(key, "")).split(",") if v.strip()]


def resolve(names: Sequence[str], n_seeds: int) -> list[SweepPlan]:
    """The sweeps that train `names` (pilot findings), with the first `n_seeds` seeds of each preset."""
    unknown = [n for n in names if n not in PILOT_FINDINGS]
    if unknown:
        raise SystemExit(
            f"error: the pilot has no preset for {', '.join(unknown)}; choose from {', '.join(PILOT_FINDINGS)}"
        )
    placements = {n: _swept(_compose(f"{GROUP}/{n}"), "placement") for n in names}
    sweeps: list[SweepPlan] = []
    done: set[str] = set()
    for key, together in SHARED.items():
        if all(n in names for n in together):
            seeds = _swept(_compose(f"{GROUP}/{key}"), "seed")[:n_seeds]
            union = list(dict.fromkeys(p for n in together for p in placements[n]))
            sweeps.append(
                SweepPlan(
                    key,
                    f"{GROUP}/{key}",
                    tuple(together),
                    tuple(union),
                    tuple(int(s) for s in seeds),
                    {n: tuple(placements[n]) for n in together},
                )
            )
            done.update(together)
    for name in names:
        if name in done:
            continue
        seeds = _swept(_compose(f"{GROUP}/{name}"), "seed")[:n_seeds]
        sweeps.append(
            SweepPlan(
                name,
                f"{GROUP}/{name}",
                (name,),
                tuple(placements[name]),
                tuple(int(s) for s in seeds),
                {name: tuple(placements[name])},
            )
        )
    return sweeps


@dataclass(frozen=True)
class Model:
    """A sweep's model as its runs build it: what a step costs, and its parameters."""

    shape: Shape
    n_params: int
    d_model: int
    depth: int
    n_heads: int
    context: int
    data: dict  # the resolved data group (the corpus to build before the probe)


def model_of(preset: str, placement: str, overrides: Sequence[str]) -> Model:
    """A preset's model at one placement, built on the CPU (a sweep's placements differ by a few norms)."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from normlab.train.flops import flops_per_token, matmul_params

    cfg = _compose(preset, [*overrides, f"placement={placement}"])
    model = instantiate(cfg.model)
    train = cfg.train
    tokens = int(train.batch_size) * int(train.seq_len) * int(train.grad_accum)
    ablation = bool(cfg.metrics.get("layer_ablation", False))
    depth = int(cfg.depth)
    shape = Shape(
        depth=depth,
        d_model=int(cfg.model.d_model),
        tokens_per_step=tokens,
        flops_per_token=flops_per_token(matmul_params(model), depth, int(train.seq_len), model.d_model),
        eval_forwards=int(train.eval_batches) * (1 + (depth if ablation else 0)),
        compiled=bool(train.compile),
    )
    data = OmegaConf.to_container(cfg.data, resolve=True)
    return Model(
        shape,
        model.n_params(),
        int(cfg.model.d_model),
        depth,
        int(cfg.model.n_heads),
        int(cfg.model.context_length),
        data,
    )


# ------------------------------------------------------------------------------------------- packing


def packing(choice: str, bench: Path | None, device: str) -> tuple[str, str]:
    """Processes or one stack per placement, and why: asked for, read from a bench_stack JSON, or the last
    measurement on this kind of device."""
    if choice in PACKINGS:
        return choice, "asked for with --pack"
    if bench is not None:
        table = json.loads(bench.read_text()).get("table", [])
        best = {}
        for row in table:
            kind = STACKED if str(row.get("mode", "")).startswith("stacked") else None
            kind = kind or (PROCESSES if str(row.get("mode", "")).startswith("joblib") else None)
            if kind and row.get("tokens_per_s", 0) > best.get(kind, (0, ""))[0]:
                best[kind] = (float(row["tokens_per_s"]), str(row["mode"]))
        if len(best) < 2:
            raise SystemExit(f"error: {bench} has no joblib and stacked rows (scripts/bench_stack.py --json)")
        chosen = max(best, key=lambda k: best[k][0])
        rates = "; ".join(f"{mode} {rate / 1e6:.2f} M tokens/s" for rate, mode in best.values())
        return chosen, f"measured in {bench}: {rates}"
    if device == "cpu":
        return PROCESSES, (
            "docs/performance.md: on 2 CPU cores one stack is about even with joblib's processes (0.93× their "
            "wall time on a short sweep, up to 10 % behind on long ones)"
        )
    return PROCESSES, (
        "the last measurement, NVIDIA H200 2026-11-27: 32 runs of model=small as 16 processes 11.2× one alone, "
        "as one stack 5.6×; the stacked launcher is being rewritten to scale on GPUs (issue 36) — "
        "--pack-from a newer `scripts/bench_stack.py --device cuda --json` output, or --pack stacked, changes it"
    )


def launcher_overrides(sweeps: Sequence[SweepPlan], how: str, cores: int) -> dict[str, tuple[list[str], int]]:
    """Each sweep's launcher settings and its waves (groups of runs one after another): as processes every
    run at once while the cores last (shared out by runs beyond); stacked one stack per placement (its
    seeds), one stack at a time per sweep."""
    total = sum(s.runs for s in sweeps)
    out = {}
    for s in sweeps:
        if how == STACKED:
            out[s.key] = (["hydra/launcher=stacked", "hydra.launcher.n_jobs=1"], len(s.placements))
            continue
        n = s.runs if total <= cores else max(1, cores * s.runs // total)
        out[s.key] = (["hydra/launcher=joblib", f"hydra.launcher.n_jobs={n}"], math.ceil(s.runs / n))
    return out


def static_cost(
    sweep: SweepPlan, shape: Shape, fig: Figures, how: str, waves: int, at_once: int, stacks_at_once: int
) -> SweepCost:
    """A sweep's cost from the figures alone (normlab.study.pilot.figures): `at_once` runs training together
    as processes, or `stacks_at_once` stacks of its seeds."""
    members = len(sweep.seeds)
    if fig is CPU:
        share = max(1.0, at_once / fig.cores) if how == PROCESSES else members * stacks_at_once / fig.cores
        step = cpu_step_s(shape) * max(share, 1.0)
        fixed = waves * fig.start_s
    elif how == PROCESSES:
        step = fig.process_step_s(shape, at_once)
        fixed = fig.start_up_s(shape, at_once) + (waves - 1) * fig.start_s
    else:
        step = fig.stack_step_s(shape, members, members * stacks_at_once)
        fixed = fig.start_up_s(shape, stacks_at_once) + (waves - 1) * fig.start_s
    return SweepCost(step, fig.instrumented_extra * step, evaluation_s(shape, step), fixed, waves)


# ------------------------------------------------------------------------------------------ launching


class ForwardAll(Forward):
    """Forward (normlab.study.sweep_signals) to every sweep running at once."""

    def __init__(self) -> None:
        super().__init__()
        self.processes: list[subprocess.Popen] = []

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        for p in self.processes:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signum)
        super().handle(signum, frame)


def sweep_command(
    sweep: SweepPlan, folder: Path, overrides: Sequence[str], python: str = sys.executable
) -> list[str]:
    """The sweep's command: its preset, placements and seeds, into folder/KEY, continuing what is there."""
    return [
        python,
        "-m",
        "normlab",
        "-m",
        f"+experiment={sweep.preset}",
        f"hydra.sweep.dir={(folder / sweep.key).resolve()}",
        f"placement={','.join(sweep.placements)}",
        f"seed={','.join(str(s) for s in sweep.seeds)}",
        *overrides,
        "train.resume=auto",
    ]


def shown(command: Sequence[str]) -> str:
    return shlex.join(["python", "train.py", *command[3:]])


def launch_all(
    commands: dict[str, list[str]], folder: Path, forward: ForwardAll, echo=print
) -> dict[str, tuple[int, float]]:
    """Run the sweeps at once (logs in folder/KEY.log); each one's exit code and wall seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    started, procs, logs = {}, {}, []
    try:
        for key, cmd in commands.items():
            log = (folder / f"{key}.log").open("a")
            logs.append(log)
            echo(f"  $ {shown(cmd)}\n    (log: {folder / f'{key}.log'})")
            started[key] = time.perf_counter()
            procs[key] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            forward.processes.append(procs[key])
        ended: dict[str, tuple[int, float]] = {}
        while len(ended) < len(procs):
            try:
                for key, p in procs.items():
                    if key not in ended and p.poll() is not None:
                        ended[key] = (p.returncode, time.perf_counter() - started[key])
                time.sleep(0.2)
            except KeyboardInterrupt:  # a handler other than ours: pass it on and keep waiting
                forward.handle(2)
        return ended
    finally:
        forward.processes = []
        for log in logs:
            log.close()
