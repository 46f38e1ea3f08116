"""The pilot's plan: one `train.max_steps` for every run, the largest whose whole set finishes within the
budget with a margin, from what each sweep costs (measured by the probe, or the static figures of a dry
run); the schedule that follows from the steps; the lines printed before training; plan.json.

Pure: no torch, no processes. The time of a sweep of S steps is

    fixed + waves × (S × step + instrumented(S) × extra + evaluations(S) × evaluation)

— `fixed` its start-up, compilation, checkpoint and summary; `waves` the groups of its runs that train one
after another (1 when every run trains at once); `step` the steady step of its slowest run with everything
packed as planned; `extra` what an instrumented step adds; `evaluation` one evaluation with the
layer-ablation probe. The sweeps run at once, so the set takes as long as its slowest sweep; the data, the
probe and the report come before and after it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from normlab.io import write_text_atomic
from normlab.study.timings import fmt_duration

PLAN_FILE = "plan.json"
MARGIN = 0.10  # of the budget, kept free: the plan's time is a prediction
HORIZON = 10_000  # issue 38's estimate (≈ 14 tokens per parameter at d_model 256): a budget that fits more stops here
WARMUP_SHARE = 0.10  # both depth papers warm up for 10 % of their steps
EVALUATIONS = 4  # after step 0: at ¼, ½, ¾ and the end
INSTRUMENTED = 40  # instrumented steps over a run (besides the dense start)
DENSE_UNTIL = 20  # metrics.dense_until's default: every step up to it is instrumented
PAPERS_TOKENS_PER_PARAMETER = 20  # the depth papers' 130M models: 20,000 steps × 131,072 tokens ≈ 2.6B
CPU_TOKENS_PER_PARAMETER = 0.4  # the CPU presets: 300 steps × 1,024 tokens at ≈ 0.8M parameters


@dataclass(frozen=True)
class SweepCost:
    """What one sweep of the pilot costs on this device, measured or modelled."""

    step_s: float  # one steady step of its slowest run, everything packed as planned
    extra_s: float  # what an instrumented step adds to a plain one
    evaluation_s: float  # one evaluation (validation batches, the layer-ablation probe)
    fixed_s: float  # start-up, compilation, checkpoint, summary: what does not grow with the steps
    waves: int = 1  # groups of its runs that train one after another

    def seconds(self, steps: int) -> float:
        """A sweep of `steps` steps on the pilot's schedule."""
        return self.time_of(schedule(steps))

    def time_of(self, s: Schedule) -> float:
        per_wave = s.steps * self.step_s + s.instrumented * self.extra_s + s.evaluations * self.evaluation_s
        return self.fixed_s + self.waves * per_wave


@dataclass(frozen=True)
class Schedule:
    """The settings that follow from the steps (the authors' ratios), as Hydra overrides."""

    steps: int
    warmup: int
    eval_every: int
    metrics_every: int

    @property
    def evaluations(self) -> int:
        """At step 0, every eval_every steps before the end, and at the end."""
        return 1 + (self.steps - 1) // self.eval_every + 1

    @property
    def instrumented(self) -> int:
        dense = min(DENSE_UNTIL + 1, self.steps)
        return dense + max(0, (self.steps - 1) // self.metrics_every - DENSE_UNTIL // self.metrics_every)

    def overrides(self) -> list[str]:
        return [
            f"train.max_steps={self.steps}",
            f"warmup_steps={self.warmup}",
            f"train.eval_every={self.eval_every}",
            f"metrics.every={self.metrics_every}",
        ]


def schedule(steps: int) -> Schedule:
    return Schedule(
        steps,
        warmup=max(1, round(WARMUP_SHARE * steps)),
        eval_every=max(1, math.ceil(steps / EVALUATIONS)),
        metrics_every=max(1, steps // INSTRUMENTED),
    )


@dataclass(frozen=True)
class SweepPlan:
    """One sweep of the pilot: its preset, the findings it serves, its runs and what they cost."""

    key: str  # its folder under pilot/sweeps/
    preset: str  # +experiment=…
    findings: tuple[str, ...]
    placements: tuple[str, ...]
    seeds: tuple[int, ...]
    # finding → the placements it is evaluated on
    evaluated_on: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cost: SweepCost | None = None

    @property
    def runs(self) -> int:
        return len(self.placements) * len(self.seeds)


@dataclass(frozen=True)
class Plan:
    """Everything the pilot decided before training, as plan.json keeps it."""

    device: str  # cuda | cpu
    budget_s: float
    packing: str
    packing_why: str
    cost_source: str  # where the step times come from
    sweeps: tuple[SweepPlan, ...]
    steps: int
    n_params: int
    tokens_per_step: int
    d_model: int
    depth: int
    n_heads: int
    context: int
    spent_s: float = 0.0  # data and probe, measured before the plan
    spent: dict[str, float] = field(default_factory=dict)  # their parts
    report_s: float = 15.0  # reserved for the report after training
    left_out: tuple[str, ...] = ()  # sentences: findings the budget could not fit
    fixed_steps: bool = False  # --steps: the steps were given, not fitted
    overrides: tuple[str, ...] = ()  # every sweep's extra overrides (device, shape, packing)

    @property
    def schedule(self) -> Schedule:
        return schedule(self.steps)

    @property
    def shape(self) -> str:
        return f"d_model {self.d_model}, {self.depth} blocks, {self.n_heads} heads, context {self.context}"

    @property
    def sweeps_s(self) -> float:
        return max((s.cost.seconds(self.steps) for s in self.sweeps if s.cost), default=0.0)

    @property
    def predicted_s(self) -> float:
        return self.spent_s + self.sweeps_s + self.report_s

    @property
    def tokens_per_run(self) -> int:
        return self.steps * self.tokens_per_step

    @property
    def tokens_per_parameter(self) -> float:
        return self.tokens_per_run / self.n_params if self.n_params else math.nan

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.sweeps)

    @property
    def findings(self) -> list[str]:
        return [f for s in self.sweeps for f in s.findings]


def available_s(budget_s: float, spent_s: float, report_s: float) -> float:
    """What the sweeps may take: the budget less its margin, what was spent and the report."""
    return budget_s * (1 - MARGIN) - spent_s - report_s


def fit_steps(costs: Sequence[SweepCost], available: float, cap: int = HORIZON) -> int:
    """The most steps (≤ cap) whose sweeps, run at once, all end within `available` seconds; 0 if none."""
    if not costs:
        return 0

    def fits(steps: int) -> bool:
        return max(c.seconds(steps) for c in costs) <= available

    if not fits(1):
        return 0
    lo, hi = 1, cap
    while lo < hi:  # time grows with the steps: the largest that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def with_costs(plan: Plan, costs: dict[str, SweepCost]) -> Plan:
    return replace(plan, sweeps=tuple(replace(s, cost=costs.get(s.key, s.cost)) for s in plan.sweeps))


# ------------------------------------------------------------------------------------------ printing


def plan_lines(plan: Plan, title: str = "Plan") -> list[str]:
    """What the pilot prints before training: runs, steps, tokens per parameter, predicted time."""
    s = plan.schedule
    lines = [f"{title}: {plan.runs} runs on {plan.device}, within a budget of {fmt_duration(plan.budget_s)}"]
    for sweep in plan.sweeps:
        shared = " (Pre-LN's runs shared)" if len(sweep.findings) > 1 else ""
        lines.append(
            f"  {sweep.key}: {', '.join(sweep.findings)}{shared} — placement ∈ {{{', '.join(sweep.placements)}}} × "
            f"seed ∈ {{{', '.join(map(str, sweep.seeds))}}} = {sweep.runs} runs (+experiment={sweep.preset})"
        )
    for sentence in plan.left_out:
        lines.append(f"  left out: {sentence}")
    lines.append(
        f"  shape: {plan.shape}; {plan.tokens_per_step:,} tokens a step; {plan.n_params:,} parameters"
    )
    lines.append(f"  packing: {plan.packing} ({plan.packing_why})")
    lines.append(f"  step times: {plan.cost_source}")
    for sweep in plan.sweeps:
        if sweep.cost is None:
            continue
        c = sweep.cost
        waves = f" × {c.waves} waves" if c.waves > 1 else ""
        lines.append(
            f"    {sweep.key}: {1000 * c.step_s:.1f} ms a step{waves}, instrumented +{1000 * c.extra_s:.1f} ms, "
            f"an evaluation {c.evaluation_s:.1f} s, start-up and compilation {c.fixed_s:.0f} s"
        )
    how = "given (--steps)" if plan.fixed_steps else "the most the budget fits"
    lines.append(
        f"  steps: {plan.steps:,} for every run ({how}); warm-up {s.warmup:,}, cosine to 0.1 × the peak, "
        f"evaluations every {s.eval_every:,} ({s.evaluations} with the layer-ablation probe), metrics every "
        f"{s.metrics_every:,}"
    )
    lines.append(
        f"  tokens: {plan.tokens_per_run / 1e6:,.1f} M a run, {plan.runs * plan.tokens_per_run / 1e9:.2f} B in all: "
        f"{plan.tokens_per_parameter:.1f} tokens per parameter (the CPU presets ≈ {CPU_TOKENS_PER_PARAMETER}, "
        f"the papers ≈ {PAPERS_TOKENS_PER_PARAMETER})"
    )
    parts = [f"{name} {fmt_duration(v)}" for name, v in plan.spent.items()]
    parts += [f"training {fmt_duration(plan.sweeps_s)}", f"report {fmt_duration(plan.report_s)}"]
    verdict = "within" if plan.predicted_s <= plan.budget_s else "OVER"
    lines.append(
        f"  predicted: {fmt_duration(plan.predicted_s)} ({', '.join(parts)}) — {verdict} the budget of "
        f"{fmt_duration(plan.budget_s)} (margin {fmt_duration(plan.budget_s - plan.predicted_s)})"
    )
    return lines


# ------------------------------------------------------------------------------------------ plan.json


def save_plan(plan: Plan, folder: Path, **extra: Any) -> Path:
    data = {**asdict(plan), **extra}
    path = folder / PLAN_FILE
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def load_plan(folder: Path) -> tuple[Plan, dict[str, Any]] | None:
    """The plan in `folder` and the rest plan.json holds (timings, the device's name), or None."""
    path = folder / PLAN_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    known = {f for f in Plan.__dataclass_fields__}
    sweeps = tuple(
        SweepPlan(
            key=s["key"],
            preset=s["preset"],
            findings=tuple(s["findings"]),
            placements=tuple(s["placements"]),
            seeds=tuple(s["seeds"]),
            evaluated_on={k: tuple(v) for k, v in s.get("evaluated_on", {}).items()},
            cost=SweepCost(**s["cost"]) if s.get("cost") else None,
        )
        for s in data["sweeps"]
    )
    fields = {k: v for k, v in data.items() if k in known and k != "sweeps"}
    for key in ("left_out", "overrides"):
        fields[key] = tuple(fields.get(key, ()))
    plan = Plan(sweeps=sweeps, **fields)
    return plan, {k: v for k, v in data.items() if k not in known}
