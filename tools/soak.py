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

File faults come between two invocations, in place of a signal (`file_share` of them): a job's
metrics.jsonl cut in the middle of a row (the next `train.resume=auto` must train the missing rows again
from a checkpoint they cover), its newest checkpoint cut short (auto must skip it), or the continue command
started twice at the same moment into the sweep directory (one runs, the other is refused in one sentence
without writing). A file fault is survived when no invocation ends a job `failed` or `crashed` for it, no
step is missing or repeated, and its job ends bit-identical to the reference. Two more kinds come after the
sweep: `concurrent_runs` pairs of single runs started together into one fresh directory with different
learning rates (one is refused having written nothing; the survivor's `.hydra/` and summary carry its own
lr), and, where a tmpfs can be mounted (root), a full disk: job 0 alone on a small file system must end
`failed` · 2 naming the file, then — the file system grown — finish from its printed continue command
bit-identical to the reference (`--launcher stacked`: the doubled continue command only, and no full disk;
see `SoakSpec.file_faults`). Every invocation's job directories are also checked for mislabelled
configs (a job whose `.hydra/config.yaml` or summary.json says another seed than its overrides).

Reported: N, M, faults survived (by kind), steps lost (steps missing from or repeated in the final
metrics.jsonl files, over all jobs), mislabelled configs, steps recomputed (training steps redone because a
SIGKILL came after the newest checkpoint: work lost, not results), jobs equal to the reference, and the wall
time.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
TRUNCATED_METRICS, DAMAGED_CHECKPOINT = "truncated-metrics", "damaged-checkpoint"
CONCURRENT_SWEEP, CONCURRENT_RUNS, DISK_FULL = "concurrent-sweep", "concurrent-runs", "disk-full"
FILE_FAULTS = (TRUNCATED_METRICS, DAMAGED_CHECKPOINT, CONCURRENT_SWEEP)
TARGETS = ("parent", "group", "worker")
GRACE_S = 10.0  # how long after the parent a job process may live
WORKER = "normlab.sweeps.worker"
ROOT = Path(__file__).resolve().parents[1]  # the checkout: train.py beside tools/ and src/


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


def default_signals() -> None:
    """In a process the soak starts, before it runs train.py: SIGINT as a terminal gives it. A soak started
    in the background of a script (`cmd &`) has SIGINT ignored, which its children would inherit, and a
    SIGINT fault would then do nothing until the sweep installs its own handlers."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
                preexec_fn=default_signals,
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


def consistency_problems(sweep_dir: Path, pending: frozenset[str] = frozenset()) -> list[str]:
    """What a user would find wrong in the sweep's directories between two invocations. A job in `pending`
    has a file fault no invocation has dealt with yet: its rows may stop short of its checkpoint until the
    next resume trains them again, so only that check is left out for it."""
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
        if summary.get("status") in ("failed", "crashed"):
            problems.append(f"{name}: {summary['status']}: {summary.get('reason')}")
        if name in pending:
            continue
        if summary.get("status") == "interrupted" and (run_dir / "checkpoints" / "last.pt").exists():
            try:
                state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True, mmap=True)
            except Exception as exc:  # damaged: by a file fault, until the next resume writes it again
                problems.append(f"{name}: its last.pt cannot be read ({type(exc).__name__})")
                continue
            train_steps = [r["step"] for r in training_rows(run_dir) if "loss" in r]
            if not (state["step"] == summary["steps"] == len(train_steps)):
                problems.append(
                    f"{name}: interrupted at {summary['steps']} steps, last.pt holds {state['step']}, "
                    f"metrics.jsonl {len(train_steps)}"
                )
    return problems


def mislabeled(run_dirs: dict[str, Path]) -> list[str]:
    """Job directories whose `.hydra/config.yaml` or summary.json names another seed than their overrides:
    the config a report would label the job's rows with is not the one that trained them."""
    import yaml

    found = []
    for name, run_dir in run_dirs.items():
        try:
            overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
            config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            continue
        seeds = [o.split("=", 1)[1] for o in overrides if o.startswith("seed=")]
        if not seeds:
            continue
        said = {"config.yaml": config.get("seed")}
        with contextlib.suppress(OSError, ValueError):
            said["summary.json"] = json.loads((run_dir / "summary.json").read_text()).get("seed")
        wrong = {f: v for f, v in said.items() if str(v) != seeds[0]}
        if wrong:
            found.append(f"{name}: seed={seeds[0]} trained it, but {wrong}")
    return found


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
    file_share: float = 0.35  # of the M faults, about this share are file faults between invocations
    concurrent_runs: int = 2  # pairs of single runs started together into one directory, after the sweep
    disk_full: bool = True  # job 0 alone on a small tmpfs (skipped where none can be mounted)
    launcher: str = "joblib"  # hydra/launcher=: joblib (the pool), or stacked (the jobs as one model)

    def file_faults(self) -> tuple[str, ...]:
        """The file-fault kinds this soak takes in turn. A stacked sweep's member that a damaged file sends
        back to an older checkpoint than its stack's trains in a stack of its own, and the full-disk job
        trains alone: equal to the uninterrupted member within float tolerance (tests/test_stacked.py), not
        bit for bit, which is what the soak checks — so a stacked soak takes the doubled continue command
        only (the damaged-file paths are a member's Run's own, soaked with joblib)."""
        return (CONCURRENT_SWEEP,) if self.launcher == "stacked" else FILE_FAULTS

    def with_disk_full(self) -> bool:
        return self.disk_full and self.launcher != "stacked"  # job 0 alone: see file_faults

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

    def single_argv(self, run_dir: Path, *extra: str) -> list[str]:
        """Job 0 of the sweep as a single run (one torch thread, as the pool gives each job)."""
        return [
            "train.py",
            *self.overrides,
            f"train.max_steps={self.steps}",
            f"train.ckpt_every={self.ckpt_every}",
            "seed=0",
            "train.num_threads=1",
            f"hydra.run.dir={run_dir}",
            *extra,
        ]


@dataclass
class FaultRecord:
    n: int
    signal: str  # SIGINT, SIGTERM, SIGKILL, or a file fault's kind (truncated-metrics, ...)
    target: str  # parent, group or worker (a worker fault with no job running goes to the parent); a job
    after_s: float  # since the sweep (re)started (0 for a fault between invocations)
    parent_exit: int | None = None
    lingering: list[int] = field(default_factory=list)  # job processes alive GRACE_S after the parent
    started_after: list[int] = field(default_factory=list)  # job processes started after the signal
    problems: list[str] = field(default_factory=list)
    redo: int = 0  # steps the resume will compute again

    @property
    def survived(self) -> bool:
        return not (self.lingering or self.started_after or self.problems)

    @property
    def kind(self) -> str:
        if self.signal in SIGNALS:
            return "signal"
        return "concurrent start" if self.signal.startswith("concurrent") else self.signal


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
    mislabeled: int = 0  # job or run directories whose config says another seed or lr than trained it

    @property
    def survived(self) -> int:
        return sum(f.survived for f in self.faults)

    @property
    def ok(self) -> bool:
        n = self.spec["jobs"]
        return (
            not self.problems
            and self.survived == len(self.faults)
            and self.completed == self.equal == n
            and self.mislabeled == 0
        )

    def by_kind(self) -> str:
        kinds: dict[str, list[int]] = {}
        for f in self.faults:
            kinds.setdefault(f.kind, [0, 0])
            kinds[f.kind][0] += 1
            kinds[f.kind][1] += f.survived
        return ", ".join(f"{k} {s}/{n}" for k, (n, s) in kinds.items())

    def line(self) -> str:
        return (
            f"faults survived: {self.survived} of {len(self.faults)} ({self.by_kind()}), steps lost: "
            f"{self.steps_lost}, mislabelled configs: {self.mislabeled} (N={self.spec['jobs']} jobs × "
            f"{self.spec['steps']} steps, {self.steps_recomputed} steps recomputed after SIGKILLs, {self.equal} "
            f"of {self.spec['jobs']} jobs bit-identical to the uninterrupted sweep, {self.invocations} "
            f"invocations, {self.wall_s:.0f} s)"
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


SIGNAL, FILE = "signal", "file"


def fault_plan(spec: SoakSpec, rng: random.Random) -> list[str]:
    """Which of the M faults are signals and which file faults (about `file_share` of them), in a random
    order that starts with a signal (a file fault needs something written first)."""
    n_file = min(round(spec.faults * spec.file_share), max(spec.faults - 1, 0))
    plan = [FILE] * n_file + [SIGNAL] * (spec.faults - n_file)
    rng.shuffle(plan)
    if plan and plan[0] == FILE:
        i = plan.index(SIGNAL)
        plan[0], plan[i] = plan[i], plan[0]
    return plan


def damage_a_file(sweep_dir: Path, kind: str, rng: random.Random) -> str | None:
    """Apply file fault `kind` to one job of the (stopped) sweep: cut its metrics.jsonl in the middle of a
    row, or its newest checkpoint short. Unfinished jobs first (a finished one may be skipped by the next
    invocation); returns the job's name, None if no job has the file yet."""
    from normlab.train.checkpoint import candidates

    jobs = job_dirs(sweep_dir)
    targets = []
    for name, run_dir in jobs.items():
        try:
            status = json.loads((run_dir / "summary.json").read_text()).get("status")
        except (OSError, ValueError):
            status = None
        path: Path | None
        if kind == TRUNCATED_METRICS:
            path = run_dir / "metrics.jsonl"
            usable = path.is_file() and len([r for r in training_rows(run_dir) if "loss" in r]) >= 2
        else:
            found = candidates(run_dir / "checkpoints")
            path = found[0] if found else None
            usable = path is not None
        if usable:
            targets.append((status == "completed", name, path))
    if not targets:
        return None
    targets.sort(key=lambda t: t[0])  # unfinished jobs first
    pool = [t for t in targets if t[0] == targets[0][0]]
    _, name, path = rng.choice(pool)
    assert path is not None
    data = path.read_bytes()
    cut = int(len(data) * rng.uniform(0.3, 0.9)) if kind == TRUNCATED_METRICS else len(data) // 3
    path.write_bytes(data[:cut])
    return name


def start_twice(
    spec: SoakSpec, sweep_dir: Path, log: Path, timeout_s: float
) -> tuple[SweepProcess | None, list[str]]:
    """The continue command started twice at the same moment into the sweep directory: one must run, the other
    be refused in one sentence. Returns the one that runs (None if neither) and what went wrong."""
    other_log = log.with_name("soak-concurrent.log")
    pair = [SweepProcess(spec.argv(sweep_dir, resume=True), path, env()) for path in (log, other_log)]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        codes = [p.proc.poll() for p in pair]
        refused = [p for p, c in zip(pair, codes, strict=True) if c == 2]
        if refused:
            runner = next(p for p in pair if p is not refused[0])
            text = (other_log if refused[0] is pair[1] else log).read_text(errors="replace")
            said = "Another sweep is using" in text or "already holds a sweep" in text
            return runner, [] if said else ["the refused start did not say why in one sentence"]
        if all(c is not None for c in codes):  # both ended (the sweep finished before the other looked)
            return None, [] if sorted(codes) == [0, 2] else [f"both starts ran (exit codes {codes})"]
        time.sleep(0.05)
    return None, ["neither start was refused"]


def concurrent_runs(spec: SoakSpec, workdir: Path, pair: int) -> tuple[FaultRecord, list[str]]:
    """Two single runs started together into one fresh directory, lr 0.001 and 0.01: one must be refused
    having written nothing, and the survivor's .hydra/ and summary.json must carry its own lr."""
    import yaml

    run_dir = workdir / "concurrent" / str(pair)
    lrs = ("0.001", "0.01")
    procs = {
        lr: subprocess.Popen(
            [sys.executable, *spec.single_argv(run_dir, "train.max_steps=30", f"optim.lr={lr}")],
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_signals,
        )
        for lr in lrs
    }
    outputs = {lr: p.communicate(timeout=spec.timeout_s)[0] for lr, p in procs.items()}
    record = FaultRecord(0, CONCURRENT_RUNS, "run dir", 0.0)
    codes = {lr: p.returncode for lr, p in procs.items()}
    mislabels = []
    if sorted(codes.values()) != [0, 2]:
        record.problems.append(f"exit codes {codes}, not one run and one refusal")
        return record, mislabels
    survivor = next(lr for lr, c in codes.items() if c == 0)
    refused = next(lr for lr, c in codes.items() if c == 2)
    if "Another run is using" not in outputs[refused] and "already holds a run" not in outputs[refused]:
        record.problems.append(f"the refused start said: {outputs[refused].strip().splitlines()[-1:]}")
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    if str(config["optim"]["lr"]) != str(float(survivor)):
        mislabels.append(
            f"{run_dir}: trained with optim.lr={survivor}, its config says {config['optim']['lr']}"
        )
    if (run_dir / "train.log").read_text().count("training from step 0") != 1:
        record.problems.append("the refused start wrote into the run's train.log")
    return record, mislabels


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs of `size` at `path` for the block; yields False where none can be mounted (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield False
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def disk_full(spec: SoakSpec, workdir: Path, reference: Path) -> FaultRecord | None:
    """Job 0 alone on a tmpfs too small for it: it must end failed · 2 with the file's name and no
    traceback; the file system then grown, its printed continue command must finish it bit-identical to
    the reference's job 0. None where no tmpfs can be mounted."""
    disk = workdir / "small-disk"
    run_dir = disk / "run"
    size_mb = 4 + 2 * spec.ckpt_every // 50  # a few step checkpoints of the tiny model, then full
    with small_filesystem(disk, f"{size_mb}m") as mounted:
        if not mounted:
            return None
        record = FaultRecord(0, DISK_FULL, "run dir", 0.0)
        first = subprocess.run(
            [sys.executable, *spec.single_argv(run_dir)], cwd=ROOT, env=env(), capture_output=True, text=True
        )
        said = [line for line in first.stderr.splitlines() if line.startswith("error: Could not write ")]
        if first.returncode != 2 or not said or "Traceback" in first.stderr or "No space left" not in said[0]:
            record.problems.append(
                f"exit {first.returncode}, said {said or first.stderr.strip().splitlines()[-1:]}"
            )
            return record
        try:
            command = json.loads((run_dir / "summary.json").read_text())["resume_command"]
        except (OSError, ValueError, KeyError):
            record.problems.append("no summary.json with a continue command")
            return record
        subprocess.run(["mount", "-o", f"remount,size={size_mb * 32}m", str(disk)], check=True)
        argv = shlex.split(command)
        again = subprocess.run(
            [sys.executable, *argv[1:]], cwd=ROOT, env=env(), capture_output=True, text=True
        )
        if again.returncode != 0:
            record.problems.append(f"its continue command exited {again.returncode}: {again.stderr[-500:]}")
        else:
            ref = _job(reference, "seed=0")
            if ref is None or comparable(training_rows(run_dir)) != comparable(training_rows(ref)):
                record.problems.append("its rows differ from the uninterrupted job's")
        return record


def _job(sweep_dir: Path, override: str) -> Path | None:
    return next((path for name, path in job_dirs(sweep_dir).items() if override in name.split()), None)


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
                job = damage_a_file(faulted, kind, rng)
                if job is None:  # nothing of that kind written yet: the next signal first, this one later
                    later = [i for i in range(len(faults) + 1, len(plan)) if plan[i] == SIGNAL]
                    if later:
                        plan[len(faults)], plan[later[0]] = SIGNAL, FILE
                    else:
                        plan[len(faults)] = SIGNAL
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
    completed, equal, lost, final_problems = final_check(spec, reference, faulted)
    wrong_labels.update(mislabeled(job_dirs(faulted)))
    for record in faults:  # a file fault whose job did not end whole, bit for bit
        if record.n in damaged:
            record.problems += [p for p in final_problems if p.startswith(f"{damaged[record.n]}:")]
    for pair in range(spec.concurrent_runs):
        record, labels = concurrent_runs(spec, spec.workdir, pair)
        record.n = len(faults) + 1
        faults.append(record)
        wrong_labels.update(labels)
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
    )


def _note(log: Path, text: str) -> None:
    with log.open("a") as out:
        out.write(f"\n=== soak: {text} ===\n")
