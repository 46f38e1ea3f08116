"""What a pilot costs before anything is measured: the static cost model behind `--dry-run`, the choice of
which findings fit the budget, and the probe's own expected time.

A real pilot measures its step times on the device first (`normlab.study.pilot.probe`) and plans on those;
these figures size only the plan printed before that. Every number says where it comes from: the last GPU
measurements (NVIDIA H200, torch 2.11, Python 3.12, 16 cores: the maintainers' GPU notes of 2026-11-26 and
2026-11-27, taken by scripts/gpu_checks.sh; docs/performance.md "On a GPU" quotes the first), this project's
CPU calibration (`normlab.study.cost`), or
— marked ASSUMED — a guess the measurements do not cover, which the pilot's probe replaces with a
measurement.

GPU step of one run while `n` runs share the device as processes: the larger of its host time (Python,
kernel launches, the per-block gradient norms: proportional to the blocks, spread over the cores) and its
share of the device, n × FLOPs per step ÷ the sustained FLOP rate. One stack of m members (the stacked
launcher): the larger of the stack's host time (measured at 16 and 32 members) and m × the device time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from normlab.study.cost import FORWARD_SHARE, JOB_S, REFERENCE_TOKENS, REFERENCE_WIDTH
from normlab.study.cost import STEP_S_HEAD as CPU_STEP_S_HEAD
from normlab.study.cost import STEP_S_PER_BLOCK as CPU_STEP_S_PER_BLOCK

PROCESSES, STACKED = "processes", "stacked"
PACKINGS = (PROCESSES, STACKED)


@dataclass(frozen=True)
class Shape:
    """What a run's step costs depend on."""

    depth: int
    d_model: int
    tokens_per_step: int  # batch × sequence length × accumulation
    flops_per_token: float  # normlab.train.flops: 6·N + 12·L·T·d
    eval_forwards: int  # forward passes of one evaluation: eval_batches × (1 + depth with the ablation probe)
    compiled: bool


@dataclass(frozen=True)
class Figures:
    """One device kind's figures; `source` names the measurement each comes from."""

    device: str
    source: str
    cores: int
    # the sustained training FLOP rate of one run at a shape wide enough to use the device (bf16, compiled)
    flops_rate: float
    # ASSUMED: the share of that rate a d_model-256 model reaches (its matrices are 3× narrower)
    narrow_share: float
    host_s_per_block: float  # host seconds of one instrumented-every-10 step, per block, one run alone
    # processes at once → one run's host efficiency (runs × it = the throughput over one alone)
    process_efficiency: tuple[tuple[int, float], ...]
    stack_host_s: tuple[float, float]  # one stack's host step: a + b × members, at depth 6
    instrumented_extra: float  # an instrumented step's extra time, as a share of a plain step
    start_s: float  # a process's start-up (imports, device, the cached corpus opened)
    compile_s: float  # torch.compile of a 12-block GPT, alone
    compile_contention: float  # ASSUMED: how much longer it takes when every run compiles at once
    corpus_s_per_story: float  # building the embedded corpus's token cache (tokenizer and ids)

    def efficiency(self, n: int) -> float:
        """Host efficiency of one of `n` processes at once, interpolated between the measured points;
        past the last one the cores are shared out."""
        points = sorted(self.process_efficiency)
        if n <= points[0][0]:
            return points[0][1]
        for (n0, e0), (n1, e1) in zip(points, points[1:], strict=False):
            if n <= n1:
                return e0 + (e1 - e0) * (n - n0) / (n1 - n0)
        n_last, e_last = points[-1]
        return e_last * n_last / n

    def device_step_s(self, shape: Shape) -> float:
        """Seconds of device time one run's training step takes."""
        return shape.flops_per_token * shape.tokens_per_step / (self.flops_rate * self.narrow_share)

    def process_step_s(self, shape: Shape, at_once: int) -> float:
        """One run's step while `at_once` runs train as processes on the device."""
        host = self.host_s_per_block * shape.depth / self.efficiency(at_once)
        return max(host, at_once * self.device_step_s(shape))

    def stack_step_s(self, shape: Shape, members: int, members_at_once: int) -> float:
        """One stack's step (all its members), while `members_at_once` train on the device."""
        a, b = self.stack_host_s
        host = (a + b * members) * shape.depth / 6
        return max(host, members_at_once * self.device_step_s(shape))

    def start_up_s(self, shape: Shape, at_once: int) -> float:
        """From a sweep's launch to its runs' first steady step: start-up and compilation."""
        compile_s = (
            self.compile_s * (self.compile_contention if at_once > 1 else 1.0) if shape.compiled else 0.0
        )
        return self.start_s + compile_s

    def corpus_s(self, stories: int) -> float:
        return self.corpus_s_per_story * stories


# NVIDIA H200 (the maintainers' GPU notes of 2026-11-26 and 2026-11-27, scripts/gpu_checks.sh).
H200 = Figures(
    device="NVIDIA H200",
    source="NVIDIA H200 measurements of 2026-11-26/27 (scripts/gpu_checks.sh, the maintainers' GPU notes): normlab instrumented, "
    "compiled, bf16 at GPT-2-small 443,459 tokens/s = 38.3 % MFU; model=small alone 303,714 tokens/s, "
    "16 runs as processes 11.2× one alone, one stack of 16/32 members 43.5/68.2 ms a step; "
    "compiling GPT-2-small 30 s; the embedded corpus (50,000 stories) 7 s",
    cores=16,
    # 443,459 tokens/s × 854.6 MFLOP per token (GPT-2 small with its 50,304-token head) = 0.383 × 989 TFLOP/s
    flops_rate=0.383 * 989e12,
    narrow_share=0.4,
    # model=small (6 blocks, batch 32 × 128) alone: 4,096 tokens / 303,714 tokens/s = 13.5 ms, ~all host
    host_s_per_block=13.5e-3 / 6,
    # joblib: 8 processes 7.34×, 16 processes 11.2× one alone (model=small, host-bound)
    process_efficiency=((1, 1.0), (8, 7.34 / 8), (16, 11.2 / 16)),
    # stacked: 16 members 43.5 ms, 32 members 68.2 ms a stack step (model=small, depth 6)
    stack_host_s=(18.8e-3, 1.544e-3),
    # an instrumented step costs 24.4 ms more than a plain one of 27.7 ms (GPT-2 small, --breakdown)
    instrumented_extra=0.9,
    start_s=5.0,  # ASSUMED: 2.7 s a process on the CPU (bench_startup) plus CUDA's initialisation
    compile_s=30.0,
    compile_contention=1.5,
    corpus_s_per_story=7.0 / 50_000,
)

# This project's 2-core CPU (normlab.study.cost's calibration): one thread per run, no compilation.
CPU = Figures(
    device="CPU",
    source="normlab.study.cost's calibration on this project's 2-core CPU (one torch thread per job)",
    cores=2,
    flops_rate=math.inf,  # unused: cpu_step_s below
    narrow_share=1.0,
    host_s_per_block=CPU_STEP_S_PER_BLOCK,
    process_efficiency=((1, 1.0), (2, 1.0)),
    stack_host_s=(0.0, 0.0),
    instrumented_extra=1.0,
    start_s=JOB_S,
    compile_s=20.0,  # "15-20 s on 2 CPU cores" (train.compile's help)
    compile_contention=2.0,
    corpus_s_per_story=1.9e-3,  # ASSUMED from one build: 50,000 stories in 93 s on the busy 2 cores
)


# ASSUMED from one probe (d_model 32, 8 × 32 tokens, 12 blocks: ≈ 0.25 of the reference step): below that the
# step's per-block Python work and instruments no longer shrink with the shape
CPU_MIN_SCALE = 0.25


def cpu_step_s(shape: Shape) -> float:
    """One run's step on one CPU core (normlab.study.cost: head + blocks, scaled by tokens and width²)."""
    scale = (shape.tokens_per_step / REFERENCE_TOKENS) * (shape.d_model / REFERENCE_WIDTH) ** 2
    return (CPU_STEP_S_HEAD + CPU_STEP_S_PER_BLOCK * shape.depth) * max(scale, CPU_MIN_SCALE)


def evaluation_s(shape: Shape, step_s: float) -> float:
    """One evaluation: its forward passes at FORWARD_SHARE of a training step each (normlab.study.cost)."""
    return shape.eval_forwards * FORWARD_SHARE * step_s


def figures_for(device: str) -> Figures:
    return CPU if device == "cpu" else H200
