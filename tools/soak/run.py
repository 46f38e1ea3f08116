"""The soak itself, `soak(spec)`: the uninterrupted reference sweep, then the same sweep hit by M faults
at random moments and resumed each time, checked after each fault and against the reference at the end,
then the faults that come after a sweep (concurrent single runs, a full disk).

Its own module because it is the one loop that orders the faults; what each fault does and what each
check looks at are in `faults` and `checks`.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path

from soak.checks import consistency_problems, final_check, job_dirs, mislabeled, redo_steps
from soak.faults import (
    FILE,
    SIGNAL,
    after_end_faults,
    concurrent_runs,
    damage_a_file,
    disk_full,
    fault_delays,
    fault_plan,
    send_fault,
    splice_a_history,
    start_twice,
)
from soak.processes import SweepProcess, env
from soak.spec import CONCURRENT_SWEEP, FILE_FAULTS, HISTORY_SPLICE, FaultRecord, SoakResult, SoakSpec


def run_sweep(spec: SoakSpec, sweep_dir: Path, resume: bool, log: Path) -> int | None:
    sweep = SweepProcess(spec.argv(sweep_dir, resume), log, env())
    code, _ = sweep.wait(spec.timeout_s)
    return code


def soak(spec: SoakSpec) -> SoakResult:
    """Run the whole soak (see the module docstring) under `spec.workdir`."""
    t0 = time.monotonic()
    spec.workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(spec.seed)
    log = spec.workdir / "soak.log"
    reference, faulted = spec.workdir / "reference", spec.workdir / "faulted"
    problems = []
    if run_sweep(spec, reference, resume=False, log=log) != 0:
        problems.append("the uninterrupted reference sweep did not exit 0")
    delays = fault_delays(spec.delay_s, time.monotonic() - t0, spec.faults)
    plan = fault_plan(spec, rng)
    kinds = rng.sample(spec.file_faults(), len(spec.file_faults()))  # each kind in turn, in a random order
    faults: list[FaultRecord] = []
    invocations = 0
    sweep: SweepProcess | None = None
    waiting: list[FaultRecord] = []  # faults sent to this invocation, checked once it has ended
    pending: dict[str, FaultRecord] = {}  # file faults by job, until an invocation has dealt with them
    damaged: dict[int, str] = {}  # the job (its overrides) of each file fault, by the fault's number
    wrong_labels: set[str] = set()
    as_signals = 0
    while len(faults) < spec.faults:
        if sweep is None:
            waiting = []
            while invocations and len(faults) < spec.faults and plan[len(faults)] == FILE:
                kind = kinds[sum(f.signal in FILE_FAULTS for f in faults) % len(kinds)]
                record = FaultRecord(len(faults) + 1, kind, "sweep dir", 0.0)
                if kind == CONCURRENT_SWEEP:
                    sweep, record.problems = start_twice(spec, faulted, log, spec.timeout_s)
                    invocations += 2
                    faults.append(record)
                    waiting.append(record)
                    _note(log, f"fault {record.n}: the continue command started twice at once")
                    break
                if kind == HISTORY_SPLICE:
                    job, record.problems = splice_a_history(spec, faulted, rng)
                else:
                    job = damage_a_file(faulted, kind, rng)
                if job is None:  # nothing of that kind written yet: the next signal first, this one later
                    later = [i for i in range(len(faults) + 1, len(plan)) if plan[i] == SIGNAL]
                    if later:
                        plan[len(faults)], plan[later[0]] = SIGNAL, FILE
                    else:
                        plan[len(faults)] = SIGNAL
                        as_signals += 1
                        _note(
                            log,
                            f"fault {len(faults) + 1}: no job has written a file to damage yet: a signal instead",
                        )
                    break
                record.target = job_dirs(faulted)[job].name
                faults.append(record)
                waiting.append(record)
                pending[job] = record
                damaged[record.n] = job
                _note(log, f"fault {record.n}: {kind} in {record.target}")
            if sweep is None:
                sweep = SweepProcess(spec.argv(faulted, resume=True), log, env())
                invocations += 1
        if len(faults) < spec.faults and plan[len(faults)] == FILE:
            # a file fault needs the sweep stopped: the next signal comes first, if any is left
            later = [i for i in range(len(faults), len(plan)) if plan[i] == SIGNAL]
            if later:
                plan[len(faults)], plan[later[0]] = SIGNAL, FILE
        if len(faults) >= spec.faults or plan[len(faults)] == FILE:
            code, _ = sweep.wait(spec.timeout_s)  # nothing to send to this invocation: let it end
        else:
            delay = rng.uniform(*delays)
            code, _ = sweep.wait(delay)
            if code is None:
                record = send_fault(sweep, len(faults) + 1, delay, rng, spec.timeout_s)
                faults.append(record)
                waiting.append(record)
                _note(
                    log,
                    f"fault {record.n}: {record.signal} to {record.target}, {delay:.1f} s into this invocation",
                )
                code = sweep.proc.poll()
            if code is None:
                continue  # a job's process was hit: the sweep goes on, and the next fault comes to it
        # the sweep ended (by the fault, or by itself having run every job): check, then resume it
        ended = sweep.lingering()
        consistency = consistency_problems(faulted, frozenset(pending))
        wrong_labels.update(mislabeled(job_dirs(faulted)))
        redo = redo_steps(faulted)
        for record in waiting:
            record.parent_exit = code
            record.lingering = sorted(set(record.lingering) | set(ended))
            record.problems += consistency
            record.redo = redo if record is waiting[-1] else 0
        for job, record in list(pending.items()):  # file faults the resume has dealt with
            if record not in waiting:
                record.problems += [c for c in consistency if c.startswith(f"{job}:")]
            if not any(c.startswith(f"{job}:") for c in consistency_problems(faulted)):
                del pending[job]
        if code == 0 and SIGNAL in plan[len(faults) :]:
            problems.append(
                f"every job completed after {len(faults)} of {spec.faults} faults: give the soak more jobs or "
                "steps, or shorter delays"
            )
            break
        sweep = None
    if sweep is not None:  # the last fault hit a job: let this invocation end, then check it
        code, _ = sweep.wait(spec.timeout_s)
        ended, consistency = sweep.lingering(), consistency_problems(faulted, frozenset(pending))
        for record in waiting:
            record.parent_exit = code
            record.lingering = sorted(set(record.lingering) | set(ended))
            record.problems += consistency
    for _ in range(3):  # finish: the sweep-resume command until the sweep exits 0
        invocations += 1
        if run_sweep(spec, faulted, resume=True, log=log) == 0:
            break
    else:
        problems.append("the sweep-resume command did not finish the sweep in 3 invocations")
    completed, equal, within, lost, final_problems = final_check(spec, reference, faulted)
    wrong_labels.update(mislabeled(job_dirs(faulted)))
    for record in faults:  # a file fault whose job did not end whole, bit for bit
        if record.n in damaged:
            record.problems += [p for p in final_problems if p.startswith(f"{damaged[record.n]}:")]
    for pair in range(spec.concurrent_runs):
        record, labels = concurrent_runs(spec, spec.workdir, pair)
        record.n = len(faults) + 1
        faults.append(record)
        wrong_labels.update(labels)
    for record in after_end_faults(spec, spec.workdir, faulted, rng):
        record.n = len(faults) + 1
        faults.append(record)
        _note(
            log, f"fault {record.n}: {record.signal} {record.after_s:.2f} s after the {record.target} ended"
        )
    if spec.with_disk_full():
        record = disk_full(spec, spec.workdir, reference)
        if record is not None:
            record.n = len(faults) + 1
            faults.append(record)
        else:
            _note(log, "no tmpfs can be mounted here (not root): the disk-full fault is left out")
    spec_data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()}
    return SoakResult(
        spec_data,
        faults,
        completed,
        equal,
        lost,
        sum(f.redo for f in faults),
        invocations,
        time.monotonic() - t0,
        problems + final_problems,
        mislabeled=len(wrong_labels),
        file_faults_as_signals=as_signals,
        within_tolerance=within,
    )


def _note(log: Path, text: str) -> None:
    with log.open("a") as out:
        out.write(f"\n=== soak: {text} ===\n")
