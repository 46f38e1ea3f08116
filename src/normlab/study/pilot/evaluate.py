"""The pilot's verdicts: each finding evaluated on its pilot runs through the finding's own `evaluate` (the
same checks and preconditions as at the CPU scale), the scale they were reached at (width, depth, steps,
tokens per parameter, device), and whether the curse of depth can happen here at all.

Only completed runs are evaluated: the schedule ends at the planned step, so a run cut before it (the
time limit's SIGTERM) is not the result of that schedule; the cut ones are named with the step they
reached.

"Can the curse of depth happen here?" (issue 38), on the Pre-LN runs of the depth sweep: both parts of it —
the depth findings' own precondition (`_depth.curse_of_depth`: 12 blocks or more, deep blocks that cost
little when skipped, and less than the shallow ones after the first) and a stream that training makes grow
with depth (the change of log(RMS last block / first block) from step 0 to the end, finding 12's
measure, above its growth margin).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from normlab.analysis.estimate import estimate
from normlab.analysis.load import NoRunsFound, RunSet, find_run_dirs, load_runs
from normlab.study.findings import FINDINGS, evaluate
from normlab.study.findings._depth import GROWTH_MARGIN, curse_of_depth, depth_profile
from normlab.study.findings._finding import CannotEvaluate
from normlab.study.findings._runs import where
from normlab.study.pilot.plan import PLAN_FILE, Plan, load_plan
from normlab.study.verdicts import Outcome, Precondition, check

SWEEPS = "sweeps"
DEPTH_FINDINGS = ("lnscale_depth", "mixln_depth")


@dataclass
class FindingResult:
    """One finding on its pilot runs."""

    name: str
    outcome: Outcome
    rs: RunSet | None
    runs: int  # the pilot's runs of its placements
    cut: list[str] = field(
        default_factory=list
    )  # runs that ended before the planned step: 'run (status, step)'


@dataclass
class PilotResult:
    folder: Path
    plan: Plan
    record: dict  # the rest of plan.json: the device's name, the measured times
    device: str  # what the runs' summaries name ('NVIDIA H200', 'cpu (2 cores, …)')
    findings: dict[str, FindingResult]
    curse: Precondition | None = None  # on the depth sweep's Pre-LN runs

    @property
    def on_gpu(self) -> bool:
        return self.plan.device != "cpu" and not self.device.startswith("cpu")

    def scale(self) -> str:
        """'d_model 256, 12 blocks, …, 3,400 steps of 16,384 tokens (4.8 tokens per parameter), NVIDIA H200'."""
        steps = self.plan.steps
        return (
            f"{self.plan.shape}, {steps:,} steps of {self.plan.tokens_per_step:,} tokens "
            f"({self.plan.tokens_per_parameter:.1f} tokens per parameter), {self.device}"
        )

    def short_scale(self) -> str:
        p = self.plan
        return (
            f"d{p.d_model} · L{p.depth} · {p.steps:,} steps · {p.tokens_per_parameter:.1f} tokens/param · "
            f"{self.device}"
        )


def pilot_folder(path: Path) -> Path | None:
    """The pilot's folder: `path` itself when it holds plan.json, else path/pilot when that does."""
    for candidate in (path, path / "pilot"):
        if (candidate / PLAN_FILE).is_file():
            return candidate
    return None


def _summary(run: Path) -> dict:
    try:
        return json.loads((run / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def evaluate_pilot(path: Path) -> PilotResult | None:
    """Every pilot finding's outcome on its completed runs (module docstring); None when there is no pilot."""
    folder = pilot_folder(path)
    if folder is None:
        return None
    plan, record = load_plan(folder)
    devices: list[str] = []
    results: dict[str, FindingResult] = {}
    curse = None
    for sweep in plan.sweeps:
        root = folder / SWEEPS / sweep.key
        try:
            dirs = find_run_dirs([root])
        except FileNotFoundError:
            dirs = []
        summaries = {d: _summary(d) for d in dirs}
        devices += [s["device"] for s in summaries.values() if s.get("device")]
        for name in sweep.findings:
            placements = sweep.evaluated_on.get(name, sweep.placements)
            mine = [d for d, s in summaries.items() if s.get("placement") in placements]
            done = [d for d in mine if summaries[d].get("status") in ("completed", "diverged")]
            cut = [
                f"{d.name} ({summaries[d].get('status', 'no summary')} at step {summaries[d].get('steps', '?')})"
                for d in mine
                if d not in done
            ]
            rs, outcome = None, None
            try:
                rs = load_runs(done) if done else None
            except NoRunsFound:
                rs = None
            if rs is None:
                outcome = Outcome.of(
                    [], notes=[f"No completed pilot run of {', '.join(placements)} in {root}."]
                )
            else:
                outcome = evaluate(name, rs, FINDINGS[name].load_extras(root))
            results[name] = FindingResult(name, outcome, rs, len(mine), cut)
            if name in DEPTH_FINDINGS and curse is None and rs is not None:
                curse = curse_here(rs)
    device = max(set(devices), key=devices.count) if devices else record.get("device_name", plan.device)
    return PilotResult(folder, plan, record, device, results, curse)


def curse_here(rs: RunSet) -> Precondition | None:
    """Whether Pre-LN shows the curse of depth in these runs (module docstring); None when they cannot say."""
    try:
        pre = depth_profile(rs, where(rs, placement="pre").index)
    except (CannotEvaluate, KeyError):
        return None
    depth = int(pre["depth"].max())
    grows = check(
        "Training makes Pre-LN's stream grow with depth",
        "change from step 0 to the end of log(RMS after the last block / after the first), Pre-LN (mean over "
        "seeds)",
        estimate(pre["growth_end"] - pre["growth_init"]),
        margin=GROWTH_MARGIN,
    )
    cursed = curse_of_depth(pre, depth)
    return Precondition.all_of(
        "Pre-LN shows the curse of depth here",
        [cursed, Precondition.shown_by(grows)],
        cursed.remedy,
    )
