"""The command line behind scripts/reproduce.py: run finding presets, then write REPORT.md.

    python scripts/reproduce.py --core                     # the core set (≤ 30 min on 2 cores)
    python scripts/reproduce.py                            # every finding
    python scripts/reproduce.py --core --scale paper       # the same at the papers' scale, on a GPU
    python scripts/reproduce.py xiong_warmup 7 --out outputs/reproduce/mine
    python scripts/reproduce.py --from-existing --out outputs/reproduce/mine   # report only, no training

Layout of OUT (default outputs/reproduce/<date>_<time>):
    sweeps/NAME/          the Hydra sweep of preset NAME (python train.py -m +experiment=findings/NAME)
    sweeps/NAME.log       its output
    sweeps/NAME.perturbed/  the same preset under the finding's perturbation (the robustness line)
    sweeps/NAME.calibration/  with --calibrate: the choice the preset makes, on seeds it does not evaluate
    timings.json          wall time, command and machine of every finding run into OUT
    REPORT.md, NAME_*.png the report (or in --report-dir)

The report covers every finding whose sweep is in OUT, in the order of the findings list.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab.study.cost import cores, sweep_cost
from normlab.study.findings import CORE, FINDINGS, Finding
from normlab.study.report import (
    MEASURE_S,
    TIMINGS_FILE,
    build_report,
    fmt_duration,
    load_timings,
)
from normlab.study.robustness import calibration_dir, perturbed_dir

# --------------------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    """What the timings were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": cores,
        "memory_gib": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_avg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


# ------------------------------------------------------------------------------------------ runs


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


# a sweep's exit code when a job did not complete (normlab.sweeps.report): also when some were invalid
EXIT_INCOMPLETE = 2


def only_invalid_skipped(sweep: Path) -> bool:
    """Whether every job of the sweep finished but those skipped as invalid — the combinations a preset's
    grid holds on purpose (deepnorm with pre placement), which make the sweep exit 2."""
    statuses = [json.loads(p.read_text()).get("status") for p in sweep.glob("*/summary.json")]
    return bool(statuses) and all(s in ("completed", "diverged", "invalid") for s in statuses)


def save_timings(out: Path, timings: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / TIMINGS_FILE).write_text(json.dumps(timings, indent=2) + "\n")


def run_preset(
    finding: Finding,
    out: Path,
    overrides: Sequence[str],
    python: str = sys.executable,
    perturbed: bool = False,
    calibration: bool = False,
    scale: str = "cpu",
) -> dict[str, Any]:
    """Run one preset's sweep (and its extra measurements), or with `perturbed` the same under the
    finding's perturbation, or with `calibration` its calibration sweep; return its timing record."""
    sweeps = out / "sweeps"
    sweep = sweeps / finding.name
    if perturbed:
        sweep = perturbed_dir(sweep)
        overrides = [*overrides, *finding.perturbation.overrides]
    elif calibration:
        sweep = calibration_dir(sweep)
        overrides = [*overrides, *finding.calibration.overrides]
    if sweep.exists():  # our own output from an earlier call: start the finding afresh
        shutil.rmtree(sweep)
    sweeps.mkdir(parents=True, exist_ok=True)
    log_path = sweeps / f"{sweep.name}.log"
    experiment = finding.paper_preset if scale == "paper" else finding.preset
    cmd = [  # `python -m normlab` is train.py, also where no checkout is around
        python,
        "-m",
        "normlab",
        "-m",
        f"+experiment={experiment}",
        f"hydra.sweep.dir={sweep.resolve()}",
        *overrides,
    ]
    shown = shlex.join(["python", "train.py", *cmd[3:]])
    print(f"  $ {shown}\n    (log: {log_path})", flush=True)
    started = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    with log_path.open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    rc = 0 if rc == EXIT_INCOMPLETE and only_invalid_skipped(sweep) else rc
    sweep_s = time.perf_counter() - t0
    record: dict[str, Any] = {
        "command": shlex.join(["python", "train.py", "-m", f"+experiment={experiment}", *overrides]),
        "scale": scale,
        "started": started.isoformat(timespec="seconds"),
        "rc": rc,
        "sweep_s": round(sweep_s, 1),
    }
    if rc != 0:
        print(f"    the sweep exited with status {rc}; see {log_path}", file=sys.stderr)
    # the measurements (finding 5's step-time profile) are of the models' shape, which no perturbation
    # changes: the perturbed sweep is judged with the preset's own (robustness_of falls back to them)
    if finding.measurements and rc == 0 and not perturbed and not calibration:
        t1 = time.perf_counter()
        finding.measure(sweep, overrides, echo=lambda line: print(f"    {line}", flush=True))
        record[MEASURE_S] = round(time.perf_counter() - t1, 1)
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    record["machine"] = machine()
    return record


# ------------------------------------------------------------------------------------------- CLI


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
        choices=("cpu", "paper"),
        default="cpu",
        help="cpu: the presets sized for 2 CPU cores (findings/NAME); paper: the sources' depth, width and "
        "horizon (findings/paper/NAME), for a GPU",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        help="also write the findings table between the findings markers of this README (README.md)",
    )
    parser.add_argument("--list", action="store_true", help="list the findings and exit")
    args = parser.parse_args(argv)
    if args.list:
        for f in FINDINGS.values():
            print(f"{f.number}. {f.name}{' (core)' if f.core else ''}: {f.claim}")
        return 0
    command = shlex.join(["python", "scripts/reproduce.py", *(argv if argv is not None else sys.argv[1:])])
    if args.from_existing:
        out = args.out or _latest_out()
        if out is None or not (out / "sweeps").is_dir():
            print(
                f"error: no sweeps under {out or 'outputs/reproduce/'}; run without --from-existing first",
                file=sys.stderr,
            )
            return 2
        names = resolve_names(args.names, args.core) if (args.names or args.core) else None
        path, verdicts = build_report(out, args.report_dir or out, names, command, args.readme)
        _print_verdicts(verdicts, path)
        return 0

    names = resolve_names(args.names, args.core)
    out = args.out or Path("outputs") / "reproduce" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    timings = load_timings(out)
    started = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    failed = []
    print(f"Reproducing {len(names)} finding(s) into {out}")
    expected = expected_time(names, args.override, not args.no_perturb, args.calibrate, args.scale)
    print(expected, flush=True)
    for i, name in enumerate(names, 1):
        finding = FINDINGS[name]
        print(f"[{i}/{len(names)}] {finding.number}. {finding.title} ({name})", flush=True)
        calibrated = None
        if args.calibrate and finding.calibration is not None:
            print("    calibration (seeds the verdict does not use)", flush=True)
            calibrated = run_preset(finding, out, args.override, calibration=True, scale=args.scale)
        record = run_preset(finding, out, args.override, scale=args.scale)
        if calibrated is not None:
            record["calibration"] = {k: calibrated[k] for k in ("command", "rc", "wall_s")}
            record["wall_s"] = round(record["wall_s"] + calibrated["wall_s"], 1)
            record["rc"] = record["rc"] or calibrated["rc"]
        if finding.perturbation is not None and not args.no_perturb:
            print(f"    perturbed: {finding.perturbation.label}", flush=True)
            second = run_preset(finding, out, args.override, perturbed=True, scale=args.scale)
            record["perturbed"] = {k: second[k] for k in ("command", "rc", "wall_s")}
            record["wall_s"] = round(record["wall_s"] + second["wall_s"], 1)
            record["rc"] = record["rc"] or second["rc"]
        record["session"] = started.isoformat(timespec="seconds")
        timings["findings"][name] = record
        save_timings(out, timings)
        print(f"    done in {fmt_duration(record['wall_s'])}", flush=True)
        if record["rc"] != 0:
            failed.append(name)
    timings["sessions"].append(
        {
            "command": command,
            "names": names,
            "started": started.isoformat(timespec="seconds"),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
    )
    save_timings(out, timings)
    path, verdicts = build_report(out, args.report_dir or out, None, command, args.readme)
    print(f"Total wall time: {fmt_duration(time.perf_counter() - t0)}")
    _print_verdicts(verdicts, path)
    return 1 if failed else 0


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
            sweeps.append([*overrides, *finding.calibration.overrides])
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
