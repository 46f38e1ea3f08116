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

Running it again into the same OUT continues what is there: each preset's sweep is run with
train.resume=auto, so finished jobs are kept (skipped), interrupted ones resumed and the rest started —
never deleted. A sweep made with other overrides (`--override`) is refused rather than mixed with new
runs. Ctrl-C (or SIGTERM) goes to the running sweep once, which saves its jobs; the script then says so in
one line with the command that continues, and exits 128 + the signal's number.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from normlab.study.cost import cores, sweep_cost
from normlab.study.findings import CORE, FINDINGS, Finding
from normlab.study.findings_report import build_report
from normlab.study.robustness import calibration_dir, perturbed_dir
from normlab.study.timings import MEASURE_S, TIMINGS_FILE, fmt_duration, load_timings

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


# a sweep's exit code when a job did not complete (normlab.sweeps.ending): also when some were invalid
EXIT_INCOMPLETE = 2


def only_invalid_skipped(sweep: Path) -> bool:
    """Whether every job of the sweep finished but those skipped as invalid — the combinations a preset's
    grid holds on purpose (deepnorm with pre placement), which make the sweep exit 2."""
    statuses = [json.loads(p.read_text()).get("status") for p in sweep.glob("*/summary.json")]
    return bool(statuses) and all(s in ("completed", "diverged", "invalid") for s in statuses)


def save_timings(out: Path, timings: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / TIMINGS_FILE).write_text(json.dumps(timings, indent=2) + "\n")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Exception):
    """A signal stopped a preset's sweep (which saved its running jobs): nothing further is started."""

    def __init__(self, signum: int, finding: str) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.finding = signum, finding


class Forward:
    """Passes each stop signal this process gets on to the running sweep, once: the sweep runs in a session
    of its own, so a Ctrl-C in the terminal reaches it only through here (as a sweep passes it to its jobs)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.process: subprocess.Popen | None = None

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signum)
        if first:
            name = signal.Signals(signum).name
            print(
                f"{name} received: the running sweep saves its jobs and stops; no further finding starts",
                file=sys.stderr,
                flush=True,
            )

    @contextlib.contextmanager
    def installed(self) -> Iterator[Forward]:
        previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for s in STOP_SIGNALS:
            signal.signal(s, self.handle)
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)


STARTED = "started"  # timings.json: the command each finding's sweep was started with, before it ends
# timings.json: the seconds spent on each finding by sessions that ended before it did (a stop, a crash,
# a machine taken back), kept up to date every TICK_S seconds while a sweep runs
UNFINISHED = "unfinished"
TICK_S = 60.0


def combined(
    current: dict[str, Any], earlier: dict[str, Any] | None, unfinished: dict[str, Any]
) -> dict[str, Any]:
    """A finding's timing record over every session that worked on it: a continued sweep's seconds are
    added to the seconds already spent (`earlier`, the record of a session that finished it with the same
    command, and `unfinished`, the seconds and number of sessions that stopped before it ended), so a report
    never quotes a resume's few seconds as what the finding cost. The parts (calibration, perturbed sweep)
    add up the same way; time from unfinished sessions counts in the total only, as its parts are unknown."""
    unfinished_s, unfinished_n = unfinished.get("wall_s", 0.0), unfinished.get("sessions", 0)
    if earlier is None and unfinished_n == 0:
        return current
    record = dict(current)
    record["sessions"] = (earlier.get("sessions", 1) if earlier else 0) + unfinished_n + 1
    record["wall_s"] = round(current["wall_s"] + (earlier or {}).get("wall_s", 0.0) + unfinished_s, 1)
    if earlier is None:
        return record
    record["started"] = earlier.get("started", current.get("started"))
    for key in ("sweep_s", MEASURE_S):
        if key in current and key in earlier:
            record[key] = round(current[key] + earlier[key], 1)
    for part in ("calibration", "perturbed"):
        if part in current and part in earlier:
            record[part] = {
                **current[part],
                "wall_s": round(current[part]["wall_s"] + earlier[part]["wall_s"], 1),
            }
    return record


def held_by_other_settings(sweep: Path, made_with: str | None, command: str) -> str | None:
    """Why the sweep already in OUT cannot be continued by `command`: it was made with other settings."""
    if made_with is None or not sweep.exists() or made_with == command:
        return None
    return (
        f"{sweep} holds this finding's sweep made with other settings ({made_with}); continue it with those "
        "(the same --override options), or choose another --out — nothing there is deleted."
    )


def run_preset(
    finding: Finding,
    out: Path,
    overrides: Sequence[str],
    python: str = sys.executable,
    perturbed: bool = False,
    calibration: bool = False,
    scale: str = "cpu",
    forward: Forward | None = None,
    tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run one preset's sweep (and its extra measurements), or with `perturbed` the same under the
    finding's perturbation, or with `calibration` its calibration sweep; return its timing record. A sweep
    already in OUT is continued (train.resume=auto: finished jobs kept, the others resumed or started), never
    deleted. Raises Stopped when a signal stopped it (the sweep saved its running jobs). `tick` is called
    every TICK_S seconds while the sweep runs."""
    sweeps = out / "sweeps"
    sweep = sweeps / finding.name
    if perturbed:
        sweep = perturbed_dir(sweep)
        overrides = [*overrides, *finding.perturbation.overrides]
    elif calibration:
        sweep = calibration_dir(sweep)
        overrides = [*overrides, *finding.calibration.overrides]
    sweeps.mkdir(parents=True, exist_ok=True)
    log_path = sweeps / f"{sweep.name}.log"
    continuing = sweep.exists()
    experiment = finding.paper_preset if scale == "paper" else finding.preset
    cmd = [  # `python -m normlab` is train.py, also where no checkout is around
        python,
        "-m",
        "normlab",
        "-m",
        f"+experiment={experiment}",
        f"hydra.sweep.dir={sweep.resolve()}",
        *overrides,
        "train.resume=auto",  # what is there already is kept: finished jobs skipped, the others resumed
    ]
    shown = shlex.join(["python", "train.py", *cmd[3:]])
    print(
        f"  $ {shown}\n    (log: {log_path}{', continuing the sweep there' if continuing else ''})",
        flush=True,
    )
    started = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    forward = forward or Forward()
    with log_path.open("a" if continuing else "w") as log:
        # a session of its own: signals reach the sweep once, through `forward`
        forward.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                try:
                    rc = forward.process.wait(timeout=TICK_S)
                    break
                except subprocess.TimeoutExpired:
                    if tick is not None:
                        tick()
                except KeyboardInterrupt:  # a handler other than ours: pass it on and keep waiting
                    forward.handle(signal.SIGINT)
        finally:
            forward.process = None
    if forward.signum is not None:
        raise Stopped(forward.signum, finding.name)
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
    there = any(d.exists() for d in (sweep, calibration_dir(sweep), perturbed_dir(sweep)))
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
    calibrated = None
    if args.calibrate and finding.calibration is not None:
        print("    calibration (seeds the verdict does not use)", flush=True)
        calibrated = run_preset(
            finding, out, args.override, calibration=True, scale=args.scale, forward=forward, tick=tick
        )
    record = run_preset(finding, out, args.override, scale=args.scale, forward=forward, tick=tick)
    if calibrated is not None:
        record["calibration"] = {k: calibrated[k] for k in ("command", "rc", "wall_s")}
        record["wall_s"] = round(record["wall_s"] + calibrated["wall_s"], 1)
        record["rc"] = record["rc"] or calibrated["rc"]
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
