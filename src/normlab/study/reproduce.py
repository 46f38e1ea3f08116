"""The command line behind scripts/reproduce.py: run finding presets, then write REPORT.md.

    python scripts/reproduce.py --core                     # the core set (≤ 30 min on 2 cores)
    python scripts/reproduce.py                            # every finding
    python scripts/reproduce.py --core --scale paper       # the same at the papers' scale, on a GPU
    python scripts/reproduce.py --scale pilot --budget 480 --out DIR   # the GPU pilot (normlab.study.pilot)
    python scripts/reproduce.py xiong_warmup 7 --out outputs/reproduce/mine
    python scripts/reproduce.py --from-existing --out outputs/reproduce/mine   # report only, no training

Layout of OUT (default outputs/reproduce/<date>_<time>):
    sweeps/NAME/          the Hydra sweep of preset NAME (python train.py -m +experiment=findings/NAME)
    sweeps/NAME.log       its output
    sweeps/NAME.perturbed/  the same preset under the finding's perturbation (the robustness line)
    sweeps/NAME.calibration/  with --calibrate: the choice the preset makes, on seeds it does not evaluate
                          (NAME.calibration-2, … : a finding's later calibration sweeps, Calibration.then)
    timings.json          wall time, command and machine of every finding run into OUT
    pilot/                with --scale pilot: plan.json, probe/, sweeps/ (normlab.study.pilot.run)
    REPORT.md, NAME_*.png the report (or in --report-dir)

The report covers every finding whose sweep is in OUT, in the order of the findings list.

Running it again into the same OUT continues what is there: each preset's sweep is run with
train.resume=auto, so finished jobs are kept (skipped), interrupted ones resumed and the rest started —
never deleted. A sweep made with other overrides (`--override`) is refused rather than mixed with new
runs. Ctrl-C (or SIGTERM) goes to the running sweep once, which saves its jobs; the script then says so in
one line with the command that continues, and exits 128 + the signal's number.

Here: the command line and the loop over findings (each finding's calibration, preset and perturbed
sweeps, and its timing record); one preset's sweep is `preset_sweep`, the signals passed on to it
`sweep_signals`, timings.json `timings`, and the report `findings_report`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from normlab.study.cost import cores, sweep_cost
from normlab.study.findings import CORE, FINDINGS, Finding
from normlab.study.findings_report import build_report
from normlab.study.findings_report.pilot import verdict_lines as pilot_verdict_lines
from normlab.study.pilot import run as pilot
from normlab.study.preset_sweep import held_by_other_settings, run_preset
from normlab.study.robustness import calibration_dirs, perturbed_dir
from normlab.study.sweep_signals import Forward, Stopped
from normlab.study.timings import STARTED, UNFINISHED, combined, fmt_duration, load_timings, save_timings


def resolve_names(tokens: Sequence[str], core: bool) -> list[str]:
    """Finding names from names or numbers; --core adds the core set; nothing given = all."""
    by_number = {str(f.number): f.name for f in FINDINGS.values()}
    chosen: list[str] = []
    for token in tokens:
        for part in token.split(","):
            part = part.strip()
            if not part:
                continue
            name = by_number.get(part, part)
            if name not in FINDINGS:
                known = ", ".join(f"{f.number}={f.name}" for f in FINDINGS.values())
                raise SystemExit(f"error: unknown finding '{part}'; choose from {known}")
            chosen.append(name)
    if core:
        chosen += CORE
    if not chosen:
        chosen = list(FINDINGS)
    order = list(FINDINGS)
    return sorted(dict.fromkeys(chosen), key=order.index)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="reproduce.py",
        description="Run the presets that test published claims about normalization "
        "(configs/experiment/findings/) "
        "and write REPORT.md: per finding the claim and source, what ran, figures, measured numbers and a "
        "verdict (reproduced / not reproduced / inconclusive / setup failed) computed from the runs.",
        epilog="Findings: "
        + "; ".join(f"{f.number} {f.name}{' (core)' if f.core else ''}" for f in FINDINGS.values()),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="findings by name or number (default: all)")
    parser.add_argument("--core", action="store_true", help=f"the core set: {', '.join(CORE)}")
    parser.add_argument(
        "--out", type=Path, help="output directory (default: outputs/reproduce/<date>_<time>)"
    )
    parser.add_argument(
        "--report-dir", type=Path, help="write REPORT.md and figures here instead of OUT (e.g. docs/findings)"
    )
    parser.add_argument(
        "--from-existing",
        action="store_true",
        help="no training: rebuild the report from the sweeps already in OUT (NAMEs default to all there)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for every preset, e.g. --override hydra.launcher.n_jobs=4 (repeatable)",
    )
    parser.add_argument(
        "--no-perturb",
        action="store_true",
        help="skip the perturbed second sweep of findings that name one (their robustness line then "
        "rests on leave-one-seed-out alone)",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="first run the calibration sweep of findings that name one (sweeps/NAME.calibration: the choice "
        "a preset makes, on seeds its verdict does not use; the report then shows its arms as measured)",
    )
    parser.add_argument(
        "--scale",
        choices=("cpu", "paper", "pilot"),
        default="cpu",
        help="cpu: the presets sized for 2 CPU cores (findings/NAME); paper: the sources' depth, width and "
        "horizon (findings/paper/NAME), for a GPU; pilot: the depth findings (12, 13; 4 if it fits) at d_model "
        "256 on one GPU within --budget seconds (findings/pilot/NAME; into OUT/pilot)",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        help="also write the findings table between the findings markers of this README (README.md)",
    )
    parser.add_argument("--list", action="store_true", help="list the findings and exit")
    pilot.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.list:
        for f in FINDINGS.values():
            print(f"{f.number}. {f.name}{' (core)' if f.core else ''}: {f.claim}")
        return 0
    command = shlex.join(["python", "scripts/reproduce.py", *(argv if argv is not None else sys.argv[1:])])
    if args.from_existing:
        out = args.out or _latest_out()
        has_pilot = out is not None and (args.pilot is not None or (out / pilot.PILOT_DIR).is_dir())
        if out is None or not ((out / "sweeps").is_dir() or has_pilot):
            print(
                f"error: no sweeps under {out or 'outputs/reproduce/'}; run without --from-existing first",
                file=sys.stderr,
            )
            return 2
        names = resolve_names(args.names, args.core) if (args.names or args.core) else None
        path, verdicts = build_report(out, args.report_dir or out, names, command, args.readme, args.pilot)
        _print_verdicts(verdicts, path)
        if has_pilot:
            print("\n".join(pilot_verdict_lines(args.pilot or out)))
        return 0

    out = args.out or Path("outputs") / "reproduce" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if args.scale == "pilot":
        return pilot.run(args, out, command)
    names = resolve_names(args.names, args.core)
    out.mkdir(parents=True, exist_ok=True)
    timings = load_timings(out)
    started = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    failed = []
    # the command that continues: this one, into this OUT (a default OUT is named by the time it started)
    resume = shlex.join(
        ["python", "scripts/reproduce.py", *(argv if argv is not None else sys.argv[1:])]
        + ([] if args.out else ["--out", str(out)])
    )
    print(f"Reproducing {len(names)} finding(s) into {out}")
    print(expected_time(names, args.override, not args.no_perturb, args.calibrate, args.scale), flush=True)
    forward = Forward()
    try:
        with forward.installed():
            for i, name in enumerate(names, 1):
                finding = FINDINGS[name]
                if forward.signum is not None:  # came between two sweeps: the next one does not start
                    raise Stopped(forward.signum, name)
                print(f"[{i}/{len(names)}] {finding.number}. {finding.title} ({name})", flush=True)
                record = run_finding(finding, out, args, timings, started, forward)
                print(f"    done in {fmt_duration(record['wall_s'])}", flush=True)
                if record["rc"] != 0:
                    failed.append(name)
    except Stopped as stop:
        print(
            f"interrupted: stopped by {signal.Signals(stop.signum).name} at finding {FINDINGS[stop.finding].number} "
            f"({stop.finding}); the running sweep saved its jobs and every finished run is kept in {out}; "
            f"continue with: {resume}",
            file=sys.stderr,
        )
        return 128 + stop.signum
    timings["sessions"].append(
        {
            "command": command,
            "names": names,
            "started": started.isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
    )
    save_timings(out, timings)
    try:
        path, verdicts = build_report(out, args.report_dir or out, None, command, args.readme)
    except KeyboardInterrupt:
        print(
            "interrupted while writing the report; every sweep is complete: write it with python "
            f"scripts/reproduce.py --from-existing --out {out}",
            file=sys.stderr,
        )
        return 130
    print(f"Total wall time: {fmt_duration(time.perf_counter() - t0)}")
    _print_verdicts(verdicts, path)
    return 1 if failed else 0


def run_finding(
    finding: Finding,
    out: Path,
    args: argparse.Namespace,
    timings: dict[str, Any],
    started: dt.datetime,
    forward: Forward,
) -> dict[str, Any]:
    """A finding's calibration sweep (with --calibrate), its preset sweep, then its perturbed sweep; its
    record saved in timings.json."""
    name = finding.name
    experiment = finding.paper_preset if args.scale == "paper" else finding.preset
    command = shlex.join(["python", "train.py", "-m", f"+experiment={experiment}", *args.override])
    made_with = timings["findings"].get(name, {}).get("command") or timings.get(STARTED, {}).get(name)
    problem = held_by_other_settings(out / "sweeps" / name, made_with, command)
    if problem is not None:
        print(f"    error: {problem}", file=sys.stderr)
        return {"rc": 2, "wall_s": 0.0}
    # recorded before the sweep starts, so that one stopped half-way is continued with the same settings
    timings.setdefault(STARTED, {})[name] = command
    save_timings(out, timings)
    # the time already spent on the sweeps this session continues (none if they are not there any more)
    sweep = out / "sweeps" / name
    there = any(
        d.exists() for d in (sweep, *calibration_dirs(sweep, finding.calibration), perturbed_dir(sweep))
    )
    earlier = timings["findings"].get(name) if there and made_with == command else None
    unfinished = timings.setdefault(UNFINISHED, {})
    before = unfinished.get(name, {}) if there else {}
    t0 = time.perf_counter()

    def tick() -> None:  # this session's seconds so far, saved in case it ends before the finding does
        timings[UNFINISHED][name] = {
            "wall_s": round(before.get("wall_s", 0.0) + time.perf_counter() - t0, 1),
            "sessions": before.get("sessions", 0) + 1,
        }
        save_timings(out, timings)

    try:
        record = _run_parts(finding, out, args, forward, tick)
    except Stopped:
        tick()
        raise
    record["session"] = started.isoformat(timespec="seconds")
    timings["findings"][name] = combined(record, earlier, before)
    timings[UNFINISHED].pop(name, None)
    save_timings(out, timings)
    return timings["findings"][name]


def _run_parts(
    finding: Finding, out: Path, args: argparse.Namespace, forward: Forward, tick: Callable[[], None]
) -> dict[str, Any]:
    """This session's calibration, preset and perturbed sweeps of one finding, in one timing record."""
    calibrated = []
    if args.calibrate and finding.calibration is not None:
        print("    calibration (seeds the verdict does not use)", flush=True)
        for index in range(len(finding.calibration.sweeps)):
            calibrated.append(
                run_preset(
                    finding,
                    out,
                    args.override,
                    calibration=index,
                    scale=args.scale,
                    forward=forward,
                    tick=tick,
                )
            )
    record = run_preset(finding, out, args.override, scale=args.scale, forward=forward, tick=tick)
    if calibrated:
        cal_rc = next((c["rc"] for c in calibrated if c["rc"]), 0)
        cal_s = round(sum(c["wall_s"] for c in calibrated), 1)
        record["calibration"] = {"command": calibrated[0]["command"], "rc": cal_rc, "wall_s": cal_s}
        if len(calibrated) > 1:  # the later calibration sweeps' commands (Calibration.then)
            record["calibration"]["then"] = [c["command"] for c in calibrated[1:]]
        record["wall_s"] = round(record["wall_s"] + cal_s, 1)
        record["rc"] = record["rc"] or cal_rc
    if finding.perturbation is not None and not args.no_perturb:
        print(f"    perturbed: {finding.perturbation.label}", flush=True)
        second = run_preset(
            finding, out, args.override, perturbed=True, scale=args.scale, forward=forward, tick=tick
        )
        record["perturbed"] = {k: second[k] for k in ("command", "rc", "wall_s")}
        record["wall_s"] = round(record["wall_s"] + second["wall_s"], 1)
        record["rc"] = record["rc"] or second["rc"]
    return record


def expected_time(
    names: Sequence[str],
    overrides: Sequence[str],
    perturb: bool = True,
    calibrate: bool = False,
    scale: str = "cpu",
) -> str:
    """'Expected: about 24 min on 2 idle cores (…)', printed before anything runs (normlab.study.cost)."""
    if scale == "paper":
        return "Expected: the paper-scale presets are sized for a GPU (hours to days each); no CPU estimate."
    core_s, jobs = 0.0, 0
    for name in names:
        finding = FINDINGS[name]
        sweeps = [list(overrides)]
        if perturb and finding.perturbation is not None:
            sweeps.append([*overrides, *finding.perturbation.overrides])
        if calibrate and finding.calibration is not None:
            sweeps += [[*overrides, *more] for more in finding.calibration.sweeps]
        for extra in sweeps:
            c = sweep_cost(finding.preset, extra)
            core_s, jobs = core_s + c.core_s, jobs + c.jobs
    n = cores()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    busy = f"; load now {load:.1f}, so longer while other processes share the cores" if load else ""
    return (
        f"Expected: about {fmt_duration(core_s / n)} on {n} idle core(s) for {jobs} jobs"
        f"{' with the perturbed sweeps' if perturb else ''}{busy} (normlab.study.cost)."
    )


def _latest_out() -> Path | None:
    root = Path("outputs") / "reproduce"
    if not root.is_dir():
        return None
    dirs = sorted((d for d in root.iterdir() if (d / "sweeps").is_dir()), key=lambda d: d.stat().st_mtime)
    return dirs[-1] if dirs else None


def _print_verdicts(verdicts: dict[str, str], path: Path) -> None:
    for name, verdict in verdicts.items():
        print(f"  {FINDINGS[name].number}. {name}: {verdict}")
    print(f"report: {path}")


if __name__ == "__main__":
    raise SystemExit(main())
