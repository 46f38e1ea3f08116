"""A fault-injection soak: a local sweep hit M times at random moments, resumed each time, checked at the end.

`scripts/soak_sweep.py` is the command line; `tests/lifecycle/test_sweep_signals.py` runs it small. What one
soak does:

1. the reference: the sweep of N short jobs (`seed=0..N-1` on the joblib launcher), uninterrupted;
2. the same sweep in another directory; M times, at a moment drawn uniformly from `delay_s` after the
   sweep (re)started (its upper end shrunk to 1.5 × the reference's wall time / M, so that on a fast
   machine the M faults still come before the sweep has finished), one fault: SIGINT, SIGTERM or SIGKILL, sent to the sweep's parent alone, to its
   process group, or to one job's process. After each fault the soak waits for the sweep to react and
   checks, from outside, what a user would: a signalled parent exits, no job process is alive 10 s later,
   no job process started after the signal, every job directory is consistent (no step twice or missing
   in metrics.jsonl up to its last row; an interrupted job's last.pt holds exactly its summary's steps);
   the fault is *survived* when all of that holds. Whenever the sweep is not running, the soak runs the
   sweep-resume command (the same command with `train.resume=auto`);
3. once M faults are in, the sweep is resumed until it exits 0, and every job is checked against the
   reference: completed, every step's row exactly once, and every row — losses, gradient norms, learning
   rates, validation losses — equal to the reference's bit for bit (`tokens_per_s` aside).

Reported: N, M, faults survived, steps lost (steps missing from or repeated in the final metrics.jsonl
files, over all jobs), steps recomputed (training steps redone because a SIGKILL came after the newest
checkpoint: work lost, not results), jobs equal to the reference, and the wall time.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
TARGETS = ("parent", "group", "worker")
GRACE_S = 10.0  # how long after the parent a job process may live
WORKER = "normlab.sweeps.worker"
ROOT = Path(__file__).resolve().parents[3]  # a checkout: train.py beside src/


# ----------------------------------------------------------------------------------------------------
# processes, seen from outside (Linux /proc)
# ----------------------------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (None if it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def now_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def workers(parent: int) -> list[int]:
    """The job processes of a local-pool sweep: the parent's children running the worker module."""
    found = []
    for pid in children(parent):
        try:
            if WORKER in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:
            continue
    return found


class SweepProcess:
    """`python train.py -m …` in a session of its own (so that its process group is the sweep alone), with
    its output appended to `log`; remembers every job process it has seen."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *argv],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.seen: set[int] = set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll_workers(self) -> list[int]:
        found = workers(self.pid)
        self.seen.update(found)
        return found

    def send(self, signum: int, target: str, rng: random.Random) -> int | None:
        """Send the fault; returns the worker's pid for a worker fault (None: parent or group)."""
        if target == "worker":
            running = self.poll_workers()
            if running:
                pid = rng.choice(running)
                os.kill(pid, signum)
                return pid
            target = "parent"  # no job is running at this moment: the parent gets it
        if target == "group":
            os.killpg(self.pid, signum)
        else:
            os.kill(self.pid, signum)
        return None

    def wait(self, timeout: float, watch_started_after: int | None = None) -> tuple[int | None, list[int]]:
        """Wait for the parent to exit; return its exit code (None on timeout) and the job processes that
        started after `watch_started_after` (clock ticks) meanwhile."""
        late: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in self.poll_workers():
                started = start_ticks(pid)
                if watch_started_after is not None and started is not None and started > watch_started_after:
                    late.add(pid)
            code = self.proc.poll()
            if code is not None:
                return code, sorted(late)
            time.sleep(0.02)
        return None, sorted(late)

    def lingering(self, grace_s: float = GRACE_S) -> list[int]:
        """The job processes still alive `grace_s` after the parent ended (each polled until then)."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in self.seen):
            time.sleep(0.1)
        return sorted(p for p in self.seen if alive(p))


# ----------------------------------------------------------------------------------------------------
# run directories, checked
# ----------------------------------------------------------------------------------------------------


def job_dirs(sweep_dir: Path) -> dict[str, Path]:
    """The sweep's run directories by job (their overrides), whatever they are named."""
    from normlab.sweeps.jobs import recorded_jobs

    return {" ".join(key): path for key, path in recorded_jobs(sweep_dir).items()}


def training_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a torn last line of a killed writer: dropped on resume
            continue
    return rows


def step_problems(rows: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(steps missing, steps repeated) among the training rows, against 0..last."""
    steps = [r["step"] for r in rows if "loss" in r]
    if not steps:
        return 0, 0
    return len(set(range(max(steps) + 1)) - set(steps)), len(steps) - len(set(steps))


def consistency_problems(sweep_dir: Path) -> list[str]:
    """What a user would find wrong in the sweep's directories between two invocations."""
    import torch

    problems = []
    for name, run_dir in job_dirs(sweep_dir).items():
        missing, repeated = step_problems(training_rows(run_dir))
        if missing or repeated:
            problems.append(f"{name}: {missing} steps missing, {repeated} repeated in metrics.jsonl")
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if summary.get("status") == "interrupted" and (run_dir / "checkpoints" / "last.pt").exists():
            state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True, mmap=True)
            train_steps = [r["step"] for r in training_rows(run_dir) if "loss" in r]
            if not (state["step"] == summary["steps"] == len(train_steps)):
                problems.append(
                    f"{name}: interrupted at {summary['steps']} steps, last.pt holds {state['step']}, "
                    f"metrics.jsonl {len(train_steps)}"
                )
    return problems


def redo_steps(sweep_dir: Path) -> int:
    """Training steps the next resume will compute again: rows beyond each job's newest checkpoint."""
    from normlab.train.checkpoint import newest

    total = 0
    for run_dir in job_dirs(sweep_dir).values():
        steps = [r["step"] for r in training_rows(run_dir) if "loss" in r]
        if not steps:
            continue
        found = newest(run_dir / "checkpoints")
        total += max(steps) + 1 - (found[1] if found else 0)
    return total


def comparable(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


# ----------------------------------------------------------------------------------------------------
# the soak
# ----------------------------------------------------------------------------------------------------


@dataclass
class SoakSpec:
    workdir: Path
    jobs: int = 6  # N
    faults: int = 12  # M
    steps: int = 400  # train.max_steps of each job
    parallel: int = 2  # hydra.launcher.n_jobs
    ckpt_every: int = 50  # step checkpoints: what a SIGKILL'd job resumes from
    delay_s: tuple[float, float] = (0.5, 12.0)  # a fault comes this long after the sweep (re)started
    seed: int = 0
    timeout_s: float = 600.0  # for any one invocation of the sweep
    launcher: str = "joblib"  # hydra/launcher=: joblib (the pool), or stacked (the jobs as one model)
    overrides: tuple[str, ...] = (
        "model=tiny",
        "logger=none",
        "data=synthetic",
        "data.n_train_stories=400",
        "data.n_val_stories=40",
        "data.vocab_size=512",
        "depth=2",
        "train.seq_len=32",
        "train.batch_size=8",
        "train.eval_every=100",
        "train.eval_batches=2",
        "train.sample_tokens=0",
        "train.progress=false",
        "warmup_steps=20",
    )

    def argv(self, sweep_dir: Path, resume: bool) -> list[str]:
        return [
            "train.py",
            "-m",
            *self.overrides,
            f"train.max_steps={self.steps}",
            f"train.ckpt_every={self.ckpt_every}",
            f"seed={','.join(str(s) for s in range(self.jobs))}",
            f"hydra/launcher={self.launcher}",
            f"hydra.launcher.n_jobs={self.parallel}",
            f"hydra.sweep.dir={sweep_dir}",
            *(["train.resume=auto"] if resume else []),
        ]


@dataclass
class FaultRecord:
    n: int
    signal: str
    target: str  # parent, group or worker (a worker fault with no job running goes to the parent)
    after_s: float  # since the sweep (re)started
    parent_exit: int | None = None
    lingering: list[int] = field(default_factory=list)  # job processes alive GRACE_S after the parent
    started_after: list[int] = field(default_factory=list)  # job processes started after the signal
    problems: list[str] = field(default_factory=list)
    redo: int = 0  # steps the resume will compute again

    @property
    def survived(self) -> bool:
        return not (self.lingering or self.started_after or self.problems)


@dataclass
class SoakResult:
    spec: dict[str, Any]
    faults: list[FaultRecord]
    completed: int  # jobs that ended completed
    equal: int  # jobs whose every row equals the reference's
    steps_lost: int
    steps_recomputed: int
    invocations: int  # times the sweep command ran (the reference excluded)
    wall_s: float
    problems: list[str]

    @property
    def survived(self) -> int:
        return sum(f.survived for f in self.faults)

    @property
    def ok(self) -> bool:
        n = self.spec["jobs"]
        return not self.problems and self.survived == len(self.faults) and self.completed == self.equal == n

    def line(self) -> str:
        return (
            f"faults survived: {self.survived} of {len(self.faults)}, steps lost: {self.steps_lost} "
            f"(N={self.spec['jobs']} jobs × {self.spec['steps']} steps, {self.steps_recomputed} steps recomputed "
            f"after SIGKILLs, {self.equal} of {self.spec['jobs']} jobs bit-identical to the uninterrupted sweep, "
            f"{self.invocations} invocations, {self.wall_s:.0f} s)"
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["survived"] = self.survived
        data["line"] = self.line()
        return json.dumps(data, indent=2)


def env() -> dict[str, str]:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": f"{src}:{path}" if path else src}


def fault_delays(delay_s: tuple[float, float], reference_s: float, faults: int) -> tuple[float, float]:
    """The range a fault's delay is drawn from: `delay_s`, its upper end at most 1.5 × the reference
    sweep's wall time / `faults` (then the delays add up to about 3/4 of the work on average, and the
    sweep is still running when the last fault comes), never below its lower end."""
    low, high = delay_s
    return low, max(low, min(high, 1.5 * reference_s / max(faults, 1)))


def run_sweep(spec: SoakSpec, sweep_dir: Path, resume: bool, log: Path) -> int | None:
    sweep = SweepProcess(spec.argv(sweep_dir, resume), log, env())
    code, _ = sweep.wait(spec.timeout_s)
    return code


def send_fault(
    sweep: SweepProcess, n: int, after_s: float, rng: random.Random, timeout_s: float
) -> FaultRecord:
    """Send fault `n` to the running sweep and wait for its effect: a signalled parent ends (its jobs
    with it), a signalled job ends and the sweep goes on. The record's checks are filled in by the caller
    once the parent has ended."""
    name, target = rng.choice(SIGNALS), rng.choice(TARGETS)
    signum = int(signal.Signals[name])
    sent_at = now_ticks()
    worker = sweep.send(signum, target, rng)
    record = FaultRecord(
        n, name, "worker" if worker is not None else ("parent" if target == "worker" else target), after_s
    )
    if worker is None:
        record.parent_exit, record.started_after = sweep.wait(timeout_s, watch_started_after=sent_at)
        return record
    deadline = time.monotonic() + GRACE_S + 60  # a step and a save
    while alive(worker) and time.monotonic() < deadline:
        sweep.poll_workers()
        time.sleep(0.05)
    if alive(worker):
        record.lingering = [worker]
    return record


def final_check(spec: SoakSpec, reference: Path, faulted: Path) -> tuple[int, int, int, list[str]]:
    """(jobs completed, jobs equal to the reference, steps lost, problems) after the last resume."""
    ref, got = job_dirs(reference), job_dirs(faulted)
    problems = [f"{name}: no run directory" for name in ref if name not in got]
    completed = equal = lost = 0
    for name, ref_dir in ref.items():
        if name not in got:
            lost += spec.steps
            continue
        summary = json.loads((got[name] / "summary.json").read_text())
        completed += summary.get("status") == "completed"
        rows = training_rows(got[name])
        steps = [r["step"] for r in rows if "loss" in r]
        missing = len(set(range(spec.steps)) - set(steps))
        lost += missing + (len(steps) - len(set(steps)))
        same = comparable(rows) == comparable(training_rows(ref_dir))
        ref_summary = json.loads((ref_dir / "summary.json").read_text())
        same = same and all(
            summary.get(k) == ref_summary.get(k)
            for k in ("final_train_loss", "final_val_loss", "best_val_loss")
        )
        equal += same
        if not same:
            problems.append(f"{name}: rows or final losses differ from the uninterrupted sweep")
    return completed, equal, lost, problems


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
    faults: list[FaultRecord] = []
    invocations = 0
    sweep: SweepProcess | None = None
    waiting: list[FaultRecord] = []  # faults sent to this invocation, checked once it has ended
    while len(faults) < spec.faults:
        if sweep is None:
            sweep, waiting = SweepProcess(spec.argv(faulted, resume=True), log, env()), []
            invocations += 1
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
        consistency = consistency_problems(faulted)
        redo = redo_steps(faulted)
        for record in waiting:
            record.parent_exit = code
            record.lingering = sorted(set(record.lingering) | set(ended))
            record.problems += consistency
            record.redo = redo if record is waiting[-1] else 0
        if code == 0 and len(faults) < spec.faults:
            problems.append(
                f"every job completed after {len(faults)} of {spec.faults} faults: give the soak more jobs or "
                "steps, or shorter delays"
            )
            break
        sweep = None
    if sweep is not None:  # the last fault hit a job: let this invocation end, then check it
        code, _ = sweep.wait(spec.timeout_s)
        ended, consistency = sweep.lingering(), consistency_problems(faulted)
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
    completed, equal, lost, final_problems = final_check(spec, reference, faulted)
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
    )


def _note(log: Path, text: str) -> None:
    with log.open("a") as out:
        out.write(f"\n=== soak: {text} ===\n")
