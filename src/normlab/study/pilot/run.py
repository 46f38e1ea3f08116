"""`scripts/reproduce.py --scale pilot`: the depth findings where the curse of depth can happen, within a
time budget on one GPU (issue 38).

    python scripts/reproduce.py --scale pilot --budget 480 --out DIR          # measure, plan, train, report
    python scripts/reproduce.py --scale pilot --budget 480 --dry-run          # the plan from the figures alone
    python scripts/reproduce.py --scale pilot --steps 20000 --out DIR         # a longer pilot, steps given

In order, every phase timed against the budget: the corpus's token cache is built; the probe trains every
sweep as the pilot will (same runs, same packing, compiled) for a few steps and reads the step times from
the runs' rows (`probe`); the plan fixes one train.max_steps for every run — the most whose sweeps finish
within the budget less a margin (`plan`), the warm-up, evaluations and metrics cadence following from it —
and is printed and saved (OUT/pilot/plan.json) before any training; the sweeps train at once into
OUT/pilot/sweeps/ (each run's summary.json written however it ends); REPORT.md gets the pilot's section.
Run again into the same OUT, it continues the saved plan (finished runs kept, the others resumed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

from normlab.study.pilot import sweeps as sw
from normlab.study.pilot.figures import PACKINGS, PROCESSES, figures_for
from normlab.study.pilot.plan import (
    HORIZON,
    Plan,
    Schedule,
    SweepCost,
    available_s,
    fit_steps,
    load_plan,
    plan_lines,
    save_plan,
)
from normlab.study.pilot.probe import ProbeFailed, sweep_cost
from normlab.study.sweep_signals import Stopped
from normlab.study.timings import fmt_duration

PILOT_DIR = "pilot"
PROBE_STEPS = {"gpu": 100, "micro": 60}  # enough for three steady flush windows after the dense start
REPORT_S = {"gpu": 20.0, "micro": 10.0}  # kept for REPORT.md after training (loading the runs, figures)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("--scale pilot (the depth findings on one GPU within a budget; issue 38)")
    g.add_argument(
        "--budget", type=float, default=480.0, help="seconds the whole pilot may take (default 480)"
    )
    g.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="where the pilot trains (default cuda)"
    )
    g.add_argument(
        "--dry-run", action="store_true", help="print the plan from the cost model's figures; train nothing"
    )
    g.add_argument("--steps", type=int, help="train this many steps instead of fitting the budget (no probe)")
    g.add_argument(
        "--max-steps",
        type=int,
        default=HORIZON,
        help=f"the most steps a budget may give (default {HORIZON:,})",
    )
    g.add_argument("--seeds", type=int, default=3, help="seeds per placement (default 3)")
    g.add_argument("--pack", choices=("auto", *PACKINGS), default="auto", help="runs as processes or stacked")
    g.add_argument(
        "--pack-from", type=Path, help="a `scripts/bench_stack.py --json` result deciding --pack auto"
    )
    g.add_argument("--micro", action="store_true", help="a tiny shape: the smoke test of the whole path")
    g.add_argument("--data-path", help="a local TinyStories copy instead of the embedded corpus")
    g.add_argument(
        "--data-only",
        action="store_true",
        help="build the token cache the pilot's runs read, then exit (scripts/gpu_pilot.sh: during the smoke)",
    )
    g.add_argument("--pilot", type=Path, help="--from-existing: the pilot's OUT (default OUT/pilot)")


def pilot_names(tokens: Sequence[str]) -> list[str] | None:
    """Finding names from names or numbers (None: none given, the pilot chooses)."""
    from normlab.study.findings import FINDINGS

    by_number = {str(f.number): f.name for f in FINDINGS.values()}
    names = [by_number.get(t, t) for token in tokens for t in token.split(",") if t.strip()]
    return [n for n in sw.PILOT_FINDINGS if n in names] + [
        n for n in names if n not in sw.PILOT_FINDINGS
    ] or None


def overrides_of(args: argparse.Namespace) -> list[str]:
    """What every run of the pilot gets besides its preset and schedule."""
    micro = list(sw.MICRO) if args.micro else []
    return [*sw.device_overrides(args.device), *micro, *sw.data_overrides(args.data_path), *args.override]


@cache
def _shape(preset: str, placement: str, overrides: tuple[str, ...]) -> sw.Model:
    return sw.model_of(preset, placement, overrides)


def _model(sweep: sw.SweepPlan, overrides: Sequence[str]) -> sw.Model:
    """A sweep's model: its first placement's (the placements' costs differ by a few norms)."""
    return _shape(sweep.preset, sweep.placements[0], tuple(overrides))


def static_plan(names: Sequence[str], args: argparse.Namespace, overrides: Sequence[str]) -> Plan:
    """The plan from the figures alone (normlab.study.pilot.figures): what a dry run prints."""
    fig = figures_for(args.device)
    sweeps = sw.resolve(names, args.seeds)
    models = {s.key: _model(s, overrides) for s in sweeps}
    how, why = sw.packing(args.pack, args.pack_from, args.device)
    launch = sw.launcher_overrides(sweeps, how, fig.cores)
    at_once = min(sum(s.runs for s in sweeps), fig.cores)
    costs = {
        s.key: sw.static_cost(s, models[s.key].shape, fig, how, launch[s.key][1], at_once, len(sweeps))
        for s in sweeps
    }
    corpora = {str(sorted(m.data.items())): m.data for m in models.values()}
    spent = {"data": sum(fig.corpus_s(int(d.get("n_train_stories") or 200_000)) for d in corpora.values())}
    if args.steps is None:
        spent["probe"] = max(c.time_of(probe_schedule(args)) for c in costs.values())
    report_s = REPORT_S["micro" if args.micro else "gpu"]
    first = models[sweeps[0].key]
    available = available_s(args.budget, sum(spent.values()), report_s)
    steps = args.steps or fit_steps(list(costs.values()), available, args.max_steps)
    return Plan(
        device=args.device,
        budget_s=args.budget,
        packing=how,
        packing_why=why,
        cost_source=f"modelled ({fig.source})",
        sweeps=tuple(replace(s, cost=costs[s.key]) for s in sweeps),
        steps=steps,
        n_params=first.n_params,
        tokens_per_step=first.shape.tokens_per_step,
        d_model=first.d_model,
        depth=first.depth,
        n_heads=first.n_heads,
        context=first.context,
        spent_s=sum(spent.values()),
        spent=spent,
        report_s=report_s,
        fixed_steps=args.steps is not None,
        overrides=tuple(overrides),
    )


def choose(args: argparse.Namespace, overrides: Sequence[str]) -> Plan:
    """The plan for the findings asked for; none asked for: 12 and 13, and 4 when the budget fits it beside
    them with every run at the full horizon (else it is left out, and the plan says what it would cost)."""
    names = pilot_names(args.names)
    if names is not None:
        return static_plan(names, args, overrides)
    required = static_plan(sw.REQUIRED, args, overrides)
    every = static_plan([*sw.REQUIRED, *sw.OPTIONAL], args, overrides)
    fits = every.predicted_s <= args.budget if args.steps else every.steps >= args.max_steps
    if fits:
        return every
    why = (
        f"{', '.join(sw.OPTIONAL)}: beside the depth findings this budget fits {every.steps:,} steps instead of "
        f"{required.steps:,}; it joins when every run reaches the pilot's horizon of {args.max_steps:,} steps (name it, "
        "`4`, to add it anyway)"
        if not args.steps
        else f"{', '.join(sw.OPTIONAL)}: with it the {args.steps:,} steps would take "
        f"{fmt_duration(every.predicted_s)}, over the budget"
    )
    return replace(required, left_out=(why,))


def probe_schedule(args: argparse.Namespace) -> Schedule:
    k = PROBE_STEPS["micro" if args.micro else "gpu"]
    return Schedule(k, warmup=max(1, k // 10), eval_every=k, metrics_every=k)


def prepare_data(plan: Plan) -> float:
    """Build each corpus's token cache once, before any run (the runs then open it)."""
    return build_corpora(plan.sweeps, plan.overrides)


def build_corpora(sweeps: Sequence[sw.SweepPlan], overrides: Sequence[str]) -> float:
    """The token caches of these sweeps' corpora (another process building one: waited for); seconds."""
    from normlab.data.corpus import load_corpus

    t0 = time.perf_counter()
    built = set()
    for sweep in sweeps:
        data = _model(sweep, overrides).data
        key = str(sorted(data.items()))
        if key not in built:
            load_corpus(data, progress=False)
            built.add(key)
    return time.perf_counter() - t0


def run_probe(
    plan: Plan, folder: Path, args: argparse.Namespace, forward: sw.ForwardAll
) -> dict[str, SweepCost]:
    """Every sweep for a few steps, packed as planned; their measured costs."""
    probe = folder / "probe"
    if probe.exists():  # an earlier probe that never became a plan: kept beside, not reused
        shutil.move(str(probe), str(folder / f"probe.{dt.datetime.now():%Y%m%d-%H%M%S}"))
    sched = probe_schedule(args)
    launch = sw.launcher_overrides(plan.sweeps, plan.packing, figures_for(plan.device).cores)
    commands = {
        s.key: sw.sweep_command(s, probe, [*plan.overrides, *launch[s.key][0], *sched.overrides()])
        for s in plan.sweeps
    }
    ended = sw.launch_all(commands, probe, forward)
    if forward.signum is not None:
        raise Stopped(forward.signum, "probe")
    costs = {}
    for s in plan.sweeps:
        rc, wall = ended[s.key]
        if rc != 0:
            raise ProbeFailed(
                f"the probe's sweep {s.key} exited with status {rc}; see {probe / (s.key + '.log')}"
            )
        dirs = [d for d in sorted((probe / s.key).iterdir()) if (d / "metrics.jsonl").is_file()]
        costs[s.key] = sweep_cost(dirs, wall, sched, _model(s, plan.overrides).shape, launch[s.key][1])
    return costs


def run(args: argparse.Namespace, out: Path, command: str) -> int:
    """The pilot (module docstring); its exit code."""
    from normlab.study.findings_report import build_report
    from normlab.study.findings_report.pilot import verdict_lines

    t0 = time.perf_counter()
    folder = out / PILOT_DIR
    forward = sw.ForwardAll()
    found = None if args.dry_run else load_plan(folder)
    overrides = overrides_of(args)
    if args.data_only:
        names = pilot_names(args.names) or [*sw.REQUIRED, *sw.OPTIONAL]
        seconds = build_corpora(sw.resolve(names, args.seeds), overrides)
        print(f"the pilot's token cache is built ({fmt_duration(seconds)})")
        return 0
    with forward.installed():
        try:
            if found is not None:
                plan, _ = found
                print(
                    f"Continuing the pilot planned in {folder / 'plan.json'} (its runs kept, the others resumed):"
                )
                print("\n".join(plan_lines(plan, "Plan (as saved)")), flush=True)
            else:
                plan = choose(args, overrides)
                title = "Plan (cost model only: --dry-run)" if args.dry_run else "Plan before measuring"
                print("\n".join(plan_lines(plan, title)), flush=True)
                if args.dry_run:
                    return 0 if plan.predicted_s <= plan.budget_s and plan.steps > 0 else 1
                plan = measure(plan, folder, args, forward, t0, command)
                if plan is None:
                    return 2
            train(plan, folder, forward)
        except Stopped as stop:
            print(
                f"interrupted: stopped by {signal.Signals(stop.signum).name} during the pilot's {stop.finding}; "
                f"every finished run is kept in {folder}; the report from what is there: python "
                f"scripts/reproduce.py --from-existing --out {out}",
                file=sys.stderr,
            )
            return 128 + stop.signum
        except ProbeFailed as e:
            print(
                f"error: {e}. Nothing was planned; fix that and run the same command again.", file=sys.stderr
            )
            return 2
    t_report = time.perf_counter()
    path, _ = build_report(out, args.report_dir or out, None, None, pilot=folder)
    record = _record(folder)
    actual = {**record.get("actual", {}), "report_s": round(time.perf_counter() - t_report, 1)}
    actual["total_s"] = round(time.perf_counter() - t0, 1)
    save_plan(plan, folder, **{**record, "actual": actual})
    print(f"Pilot done in {fmt_duration(actual['total_s'])} (predicted {fmt_duration(plan.predicted_s)}).")
    print("\n".join(verdict_lines(folder)))
    print(f"report: {path}")
    return 0


def measure(
    plan: Plan, folder: Path, args: argparse.Namespace, forward: sw.ForwardAll, t0: float, command: str
) -> Plan | None:
    """Data, probe, then the plan on the measured costs, saved before training; None if the budget is too
    small for a pilot worth its name."""
    print("Building the corpus's token cache ...", flush=True)
    data_s = prepare_data(plan)
    print(f"  {fmt_duration(data_s)}", flush=True)
    if forward.signum is not None:  # came while the corpus was being built: nothing further starts
        raise Stopped(forward.signum, "data")
    when = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    if args.steps:  # the steps are given: nothing to measure them for
        spent = {"data": data_s, "planning": time.perf_counter() - t0 - data_s}
        planned = replace(plan, spent=spent, spent_s=sum(spent.values()))
        print("\n".join(plan_lines(planned, "Plan")), flush=True)
        save_plan(planned, folder, planned_at=when, command=command)
        return planned
    print(f"Probe: every sweep for {probe_schedule(args).steps} steps, packed as planned ...", flush=True)
    t_probe = time.perf_counter()
    costs = run_probe(plan, folder, args, forward)
    probe_s = time.perf_counter() - t_probe
    spent = {"data": data_s, "probe": probe_s, "planning": time.perf_counter() - t0 - data_s - probe_s}
    planned = replace(
        plan,
        sweeps=tuple(replace(s, cost=costs[s.key]) for s in plan.sweeps),
        spent=spent,
        spent_s=sum(spent.values()),
        cost_source=f"measured on this device by a {probe_schedule(args).steps}-step probe of every sweep, "
        f"packed as planned (normlab.study.pilot.probe)",
    )
    steps = fit_steps(
        list(costs.values()), available_s(plan.budget_s, planned.spent_s, planned.report_s), args.max_steps
    )
    planned = replace(planned, steps=steps)
    print("\n".join(plan_lines(planned, "Plan")), flush=True)
    minimum = 2 * probe_schedule(args).steps
    if steps < minimum:
        print(
            f"error: the budget leaves {steps:,} steps a run, fewer than {minimum:,} (twice the probe's); nothing "
            f"was trained. Give a larger --budget (the plan above says what each part takes).",
            file=sys.stderr,
        )
        return None
    save_plan(planned, folder, planned_at=when, command=command)
    return planned


def _record(folder: Path) -> dict:
    """What plan.json holds besides the plan (the command, the measured times)."""
    found = load_plan(folder)
    return found[1] if found else {}


def train(plan: Plan, folder: Path, forward: sw.ForwardAll) -> None:
    """The sweeps at once, into folder/sweeps; their times added to plan.json."""
    launch = sw.launcher_overrides(plan.sweeps, plan.packing, figures_for(plan.device).cores)
    commands = {
        s.key: sw.sweep_command(
            s, folder / "sweeps", [*plan.overrides, *launch[s.key][0], *plan.schedule.overrides()]
        )
        for s in plan.sweeps
    }
    print(f"Training {plan.runs} runs of {plan.steps:,} steps ({plan.packing}) ...", flush=True)
    t = time.perf_counter()
    ended = sw.launch_all(commands, folder / "sweeps", forward)
    training_s = time.perf_counter() - t
    record = _record(folder)
    actual = {
        **{k: round(v, 1) for k, v in plan.spent.items()},
        "training_s": round(training_s, 1),
        "exit_codes": {k: rc for k, (rc, _) in ended.items()},
    }
    save_plan(plan, folder, **{**record, "actual": actual})
    print(f"  trained in {fmt_duration(training_s)} (predicted {fmt_duration(plan.sweeps_s)})", flush=True)
    for key, (rc, _) in ended.items():
        if rc != 0:
            print(
                f"  the sweep {key} exited with status {rc}; see {folder / 'sweeps' / (key + '.log')}",
                file=sys.stderr,
            )
    if forward.signum is not None:
        raise Stopped(forward.signum, "training")


__all__ = ["PILOT_DIR", "PROCESSES", "add_arguments", "run"]
