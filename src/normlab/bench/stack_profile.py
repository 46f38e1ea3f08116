"""Where a stacked step's device work goes: torch.profiler over a few steps of a stack of S runs and of one
run alone, grouped by operator (CPU) or by kernel (CUDA), the stack beside S × the run alone — the work a
stack does that S separate runs would not (issue 36: on an H100 a 32-member stacked step of `model=small`
took 64 ms, of which the host needed only 15 ms).

    python scripts/bench_stack.py --profile --device cuda                      # 32 × model=small, batch 32
    python scripts/bench_stack.py --profile --members 4 --batch 4 model=tiny   # a CPU look at a small size

Both trainers run in this process through the real loop (normlab.train.fit, the rows made and written by
the real sink at each flush), as bench.stack_host's do, with logger=none's measurements (probes on, no
gradient histograms). Three kinds of step are profiled separately, each after a step of its own kind as
warm-up (vmap's caches, cuBLAS's handles, the allocator):

- steady: steps between two instrumented ones (most of a run's steps);
- probed: an instrumented step past `metrics.dense_until` (every `metrics.every` steps);
- probed+rank: an instrumented step that also measures the embedding's effective rank (every dense step).

For each kind: the step's time unprofiled (wall clock with the device synchronised on CUDA; this process's
CPU time on the CPU, one thread), the device time and the number of kernels launched per step (CUDA:
kernels, memcpy and memset; CPU: aten operators), and the top `--top` kernels / operators by the stack's
time, each beside the run alone's times S ("S × alone") and their ratio — above 1: work the stack does
more of than S runs. `--out DIR` writes the tables as DIR/profile.md, `--json PATH` everything.

Probed steps past the dense start are `metrics.every` apart, so each is trained on its own (the loop pauses
after it, flushing its row to the host, as it does every `train.flush_every` steps anyway).
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

KINDS = ("steady", "probed", "probed+rank")
# the synthetic corpus the windows come from, smaller than data=synthetic's default so that it is made in
# seconds on a fresh machine; the shapes (the model's vocabulary: model.vocab_size) are the benchmark's
SMALL_CORPUS = ("data.n_train_stories=2000", "data.n_val_stories=200")


def kinds_of_steps(metrics: dict[str, Any], count: int) -> dict[str, list[int]]:
    """Per kind of step, a warm-up step and then `count` steps of that kind: steady steps in a row between
    two instrumented ones, probed ones `metrics.every` apart, probed+rank ones in a row among the dense ones."""
    from normlab.metrics.instruments import InstrumentConfig

    cfg = InstrumentConfig.from_config(metrics)
    if not cfg.enabled or cfg.every <= count + 1 or cfg.dense_until < count + 1 or not cfg.rank_every:
        raise ValueError(
            f"profiling {count} steps of each kind needs metrics.enabled, metrics.every > {count + 1}, "
            f"metrics.dense_until ≥ {count + 1} and metrics.rank_every > 0; set them so."
        )
    every = cfg.every
    after_dense = range((cfg.dense_until // every + 1) * every, cfg.dense_until + 1000 * every, every)
    probed = [s for s in after_dense if not cfg.rank(s)][: count + 1]
    if len(probed) < count + 1:
        raise ValueError(
            "every instrumented step measures the rank (metrics.rank_every=1); raise it to profile."
        )
    steady = probed[0] + 1
    return {
        "steady": list(range(steady, steady + count + 1)),
        "probed": probed,
        "probed+rank": list(range(1, count + 2)),
    }


def _trace(prof: Any, device: str) -> dict[str, tuple[float, int]]:
    """name → (self time in µs, count) of every kernel (CUDA: kernels, memcpy, memset) or aten operator (CPU)."""
    found: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    if device == "cuda":
        from torch.autograd import DeviceType

        for e in prof.events():
            if e.device_type == DeviceType.CUDA:  # a kernel, memcpy or memset, as the device ran it
                found[e.name][0] += e.time_range.elapsed_us()
                found[e.name][1] += 1
    else:
        for e in prof.key_averages():
            if e.key.startswith("aten::"):
                found[e.key][0] += e.self_cpu_time_total
                found[e.key][1] += e.count
    return {k: (v[0], int(v[1])) for k, v in found.items()}


def _steps(runner: Any, steps: list[int], device: str) -> float:
    """Train `steps` (runs of consecutive step numbers in a row, through the loop); the seconds per step
    (wall, the device synchronised) or CPU seconds on the CPU."""
    import torch

    runs: list[list[int]] = []
    for s in steps:
        if runs and runs[-1][-1] + 1 == s:
            runs[-1].append(s)
        else:
            runs.append([s])
    if device == "cuda":
        torch.cuda.synchronize()
    begin, cpu = time.perf_counter(), 0.0
    for run in runs:
        runner.trainer.step = run[0]
        cpu += runner.run(len(run))
    if device == "cuda":
        torch.cuda.synchronize()
        return (time.perf_counter() - begin) / len(steps)
    return cpu / len(steps)


def profile_kind(runner: Any, steps: list[int], device: str) -> dict[str, Any]:
    """One kind of step of one trainer: steps[0] as warm-up, the others timed, then profiled."""
    from torch.profiler import ProfilerActivity, profile

    _steps(runner, steps[:1], device)
    seconds = _steps(runner, steps[1:], device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        _steps(runner, steps[1:], device)
    n = len(steps) - 1
    per = {name: (us / n / 1000, count / n) for name, (us, count) in _trace(prof, device).items()}
    return {
        "ms_per_step": 1000 * seconds,
        "device_ms_per_step": sum(ms for ms, _ in per.values()),
        "launches_per_step": sum(count for _, count in per.values()),
        "by_name": per,
    }


# kernel / operator families, first match wins: a stack's batched kernels and a run alone's differ in name
FAMILIES = (
    ("eigensolver", r"syev|eigh|stedc|sytrd|ormtr|larf|cusolver|geqrf|lapack"),
    ("attention", r"flash|fmha|attention|sdpa|efficient_attention"),
    ("matrix products", r"gemm|xmma|cutlass|cublas|matmul|\bmm\b|addmm|bmm|sm\d\d_"),
    ("log-softmax, cross-entropy", r"softmax|nll_loss|cross_entropy|logsumexp"),
    ("norms", r"layer_norm|layernorm|rms_norm|batch_norm|vector_norm|\bnorm"),
    ("optimizer", r"adam"),
    ("copies, fills", r"copy|memcpy|memset|fill|zero|cat\b|index|gather|scatter|embedding"),
    ("other elementwise, reductions", r"."),
)


def family(name: str) -> str:
    return next(f for f, pattern in FAMILIES if re.search(pattern, name, re.IGNORECASE))


def by_family(found: dict[str, Any], members: int) -> list[dict[str, Any]]:
    """The stack's and S × the run alone's time and calls per family (FAMILIES)."""
    sums: dict[str, list[float]] = {f: [0.0, 0.0, 0.0, 0.0] for f, _ in FAMILIES}
    for side, scale, offset in (("stack", 1, 0), ("alone", members, 2)):
        for name, (ms, count) in found[side].items():
            row = sums[family(name)]
            row[offset] += ms * scale
            row[offset + 1] += count
    return [
        {"family": f, "stack_ms": v[0], "stack_calls": v[1], "alone_ms_x_members": v[2], "alone_calls": v[3]}
        for f, v in sums.items()
        if v[0] or v[2]
    ]


def compare(stack: dict[str, Any], alone: dict[str, Any], members: int, top: int) -> list[dict[str, Any]]:
    """The `top` names by the stack's time, each with S × the run alone's time and count."""
    rows = []
    names = sorted(stack["by_name"], key=lambda k: -stack["by_name"][k][0])[:top]
    for name in names:
        ms, count = stack["by_name"][name]
        alone_ms, alone_count = alone["by_name"].get(name, (0.0, 0.0))
        rows.append(
            {
                "name": name,
                "stack_ms": ms,
                "stack_count": count,
                "alone_ms_x_members": alone_ms * members,
                "alone_count": alone_count,
                "ratio": ms / (alone_ms * members) if alone_ms else None,
            }
        )
    return rows


def run_profile(
    device: str,
    members: int,
    model: str,
    batch: int,
    head: str,
    steps: int,
    top: int,
    overrides: list[str],
    on_kind: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Profile a run alone and a stack of `members` at `model`, `batch` on `device` (see the docstring);
    `on_kind(result so far)` after each kind of step (a run cut off by its time limit keeps those)."""
    import torch
    from omegaconf import OmegaConf

    from normlab.bench.stack_host import Config, Runner
    from normlab.config import checked
    from normlab.config.compose import compose_config
    from normlab.train.build import run_corpus

    if device == "cpu":
        torch.set_num_threads(1)
    else:
        torch.set_float32_matmul_precision("high")  # as a run does (normlab.train.run)
    settings = [
        f"model={model}",
        "data=synthetic",
        f"train.batch_size={batch}",
        "train.eval_every=0",
        "logger=none",
        f"train.device={device}",
        f"train.max_steps={10**6}",
        *SMALL_CORPUS,
        *overrides,
    ]
    begin = time.perf_counter()
    first = checked(OmegaConf.create(compose_config([*settings, "seed=0"])))
    cfgs = [{**first, "seed": s} for s in range(members)]  # what differs between the members: the seed
    corpus = run_corpus(first, progress=False)
    kinds = kinds_of_steps(cfgs[0]["metrics"], steps)
    path = head if head != "auto" else ("fused" if device == "cpu" else "plain")
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (one thread)",
        "members": members,
        "model": model,
        "batch": batch,
        "head": path,
        "steps": steps,
        "overrides": overrides,
        "kinds": {},
    }
    with tempfile.TemporaryDirectory(prefix="normlab-bench-profile-") as tmp:
        runners = {
            n: Runner(Config(path, n), cfgs, corpus, Path(tmp), device=device, histograms=False)
            for n in (0, members)
        }
        out["setup_s"] = time.perf_counter() - begin
        for kind in KINDS:
            alone = profile_kind(runners[0], kinds[kind], device)
            stack = profile_kind(runners[members], kinds[kind], device)
            out["kinds"][kind] = {
                "steps": kinds[kind][1:],
                "alone": {k: v for k, v in alone.items() if k != "by_name"},
                "stack": {k: v for k, v in stack.items() if k != "by_name"},
                "top": compare(stack, alone, members, top),
                "families": by_family({"stack": stack["by_name"], "alone": alone["by_name"]}, members),
                "alone_top": compare(alone, alone, 1, top),
            }
            if on_kind is not None:
                on_kind(out)
    return out


def tables(result: dict[str, Any], kinds: list[str] | None = None, header: bool = True) -> str:
    """The result as Markdown: per kind of step (`kinds`, default all), the totals and the top names."""
    s = result["members"]
    unit = "kernel" if result["device"] != "cpu (one thread)" else "operator"
    clock = "wall, synchronised" if unit == "kernel" else "CPU time"
    lines = []
    if header:
        lines.append(
            f"{result['device']}: a stack of {s} × model={result['model']} against one run alone, batch "
            f"{result['batch']}, head {result['head']}, {result['steps']} steps of each kind profiled "
            f"({' '.join(result['overrides'])}; set-up {result['setup_s']:.0f} s)"
        )
    for kind in kinds or list(result["kinds"]):
        found = result["kinds"][kind]
        a, st = found["alone"], found["stack"]
        lines += [
            "",
            f"### {kind} steps ({', '.join(str(k) for k in found['steps'])})",
            "",
            f"| per step | alone | stack of {s} | stack / ({s} × alone) |",
            "|---|---|---|---|",
            f"| ms ({clock}) | {a['ms_per_step']:.2f} | {st['ms_per_step']:.2f} | "
            f"{st['ms_per_step'] / (s * a['ms_per_step']):.3f} |",
            f"| {unit} ms (profiled) | {a['device_ms_per_step']:.2f} | {st['device_ms_per_step']:.2f} | "
            f"{st['device_ms_per_step'] / (s * a['device_ms_per_step']):.3f} |",
            f"| {unit} calls | {a['launches_per_step']:.0f} | {st['launches_per_step']:.0f} | "
            f"({st['launches_per_step'] / a['launches_per_step']:.2f} × alone's) |",
            "",
            f"| family | stack ms | calls | {s} × alone ms | alone calls | stack / ({s} × alone) |",
            "|---|---|---|---|---|---|",
        ]
        for row in found["families"]:
            ratio = row["stack_ms"] / row["alone_ms_x_members"] if row["alone_ms_x_members"] else None
            lines.append(
                f"| {row['family']} | {row['stack_ms']:.3f} | {row['stack_calls']:.0f} | "
                f"{row['alone_ms_x_members']:.3f} | {row['alone_calls']:.0f} | "
                + (f"{ratio:.2f} |" if ratio is not None else "(stack only) |")
            )
        lines += [
            "",
            f"| {unit} | stack ms | calls | {s} × alone ms | alone calls | stack / ({s} × alone) |",
            "|---|---|---|---|---|---|",
        ]
        for row in found["top"]:
            ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "(stack only)"
            lines.append(
                f"| `{row['name'][:90]}` | {row['stack_ms']:.3f} | {row['stack_count']:.0f} | "
                f"{row['alone_ms_x_members']:.3f} | {row['alone_count']:.0f} | {ratio} |"
            )
    return "\n".join(lines)


def from_args(args: Any, shape: tuple[Any, ...]) -> dict[str, Any]:
    """`scripts/bench_stack.py --profile`: the tables printed (and OUT/profile.md rewritten) as each kind of
    step ends, everything in --json; `shape` is the GPU benchmark's (model, members, steps, batch, …)."""
    model, members, _, batch = shape[:4]

    def show(found: dict[str, Any]) -> None:  # each kind as it ends: a run cut off keeps what it measured
        kind = list(found["kinds"])[-1]
        print(tables(found, [kind], header=len(found["kinds"]) == 1), flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "profile.md").write_text(tables(found) + "\n")

    out = run_profile(
        args.device,
        int(args.members or members),
        args.model or model,
        args.batch or batch,
        args.head,
        args.profile_steps,
        args.top,
        args.overrides,
        on_kind=show,
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return out
