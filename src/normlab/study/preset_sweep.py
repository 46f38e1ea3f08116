"""One preset's sweep run into OUT: the command (`python -m normlab -m +experiment=…`, resumed with
train.resume=auto), its log, the finding's measurements after it, and its timing record; a sweep already
there is continued, one made with other settings refused.

Its own module because it is the one place a finding's sweep process is started and waited on (with a
tick every TICK_S seconds, so the time of a session that ends half-way is not lost).
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from normlab.study.findings import Finding
from normlab.study.robustness import calibration_dir, perturbed_dir
from normlab.study.sweep_signals import Forward, Stopped
from normlab.study.timings import MEASURE_S, machine

# seconds between two calls of a running sweep's `tick` (the unfinished seconds saved in timings.json)
TICK_S = 60.0

# a sweep's exit code when a job did not complete (normlab.sweeps.ending): also when some were invalid
EXIT_INCOMPLETE = 2


def only_invalid_skipped(sweep: Path) -> bool:
    """Whether every job of the sweep finished but those skipped as invalid — the combinations a preset's
    grid holds on purpose (deepnorm with pre placement), which make the sweep exit 2."""
    statuses = [json.loads(p.read_text()).get("status") for p in sweep.glob("*/summary.json")]
    return bool(statuses) and all(s in ("completed", "diverged", "invalid") for s in statuses)


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
    calibration: int | None = None,
    scale: str = "cpu",
    forward: Forward | None = None,
    tick: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run one preset's sweep (and its extra measurements), or with `perturbed` the same under the
    finding's perturbation, or with `calibration` (an index into Calibration.sweeps) that calibration sweep;
    return its timing record. A sweep
    already in OUT is continued (train.resume=auto: finished jobs kept, the others resumed or started), never
    deleted. Raises Stopped when a signal stopped it (the sweep saved its running jobs). `tick` is called
    every TICK_S seconds while the sweep runs."""
    sweeps = out / "sweeps"
    sweep = sweeps / finding.name
    if perturbed:
        sweep = perturbed_dir(sweep)
        overrides = [*overrides, *finding.perturbation.overrides]
    elif calibration is not None:
        sweep = calibration_dir(sweep, calibration)
        overrides = [*overrides, *finding.calibration.sweeps[calibration]]
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
    if finding.measurements and rc == 0 and not perturbed and calibration is None:
        t1 = time.perf_counter()
        finding.measure(sweep, overrides, echo=lambda line: print(f"    {line}", flush=True))
        record[MEASURE_S] = round(time.perf_counter() - t1, 1)
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    record["machine"] = machine()
    return record
