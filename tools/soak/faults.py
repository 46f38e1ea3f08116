"""The faults: a signal sent to the running sweep (its parent, its process group or one job), a file
damaged between two invocations (a metrics.jsonl cut mid-row, a newest checkpoint cut short or its tensor
data damaged), a job rewound into another history, the continue command started twice at once, two single
runs started together into one directory, a full disk, and signals just after a run or a sweep ended; with
the plan of which faults come when.

Its own module because each fault is one way a user's sweep gets hurt; the soak's loop (`run`) only
decides when each comes.
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
from collections.abc import Iterator
from pathlib import Path

from soak.checks import comparable, job_dir, job_dirs, training_rows
from soak.processes import GRACE_S, ROOT, SweepProcess, alive, default_signals, env, now_ticks
from soak.spec import (
    AFTER_END,
    CONCURRENT_RUNS,
    DAMAGED_DATA,
    DISK_FULL,
    SIGNALS,
    TARGETS,
    TRUNCATED_METRICS,
    FaultRecord,
    SoakSpec,
)

SIGNAL, FILE = "signal", "file"


def fault_delays(delay_s: tuple[float, float], reference_s: float, faults: int) -> tuple[float, float]:
    """The range a fault's delay is drawn from: `delay_s`, its upper end at most 1.5 × the reference
    sweep's wall time / `faults` (then the delays add up to about 3/4 of the work on average, and the
    sweep is still running when the last fault comes), never below its lower end."""
    low, high = delay_s
    return low, max(low, min(high, 1.5 * reference_s / max(faults, 1)))


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


def damage_a_file(sweep_dir: Path, kind: str, rng: random.Random) -> str | None:
    """Apply file fault `kind` to one job of the (stopped) sweep: cut its metrics.jsonl in the middle of a
    row, its newest checkpoint short, or that checkpoint's tensor data damaged in place (its zip index
    whole: torch still opens it). Unfinished jobs first (a finished one may be skipped by the next
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
    if kind == DAMAGED_DATA:
        if not damage_tensor_data(path):
            return None
        return name
    data = path.read_bytes()
    cut = int(len(data) * rng.uniform(0.3, 0.9)) if kind == TRUNCATED_METRICS else len(data) // 3
    path.write_bytes(data[:cut])
    return name


def damage_tensor_data(path: Path) -> bool:
    """XOR up to 4000 bytes of the first tensor's data in a checkpoint (its zip index left whole); False
    where the file is no zip archive."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    except (zipfile.BadZipFile, StopIteration, OSError):
        return False
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)  # the local header, then the data
    for i in range(start + info.file_size // 4, start + min(info.file_size, info.file_size // 4 + 4000)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return True


REWIND = """
import sys
from pathlib import Path
from normlab.config.compose import compose_config
from normlab.train.run import Run
summary = Run(compose_config(sys.argv[2:]), Path(sys.argv[1])).execute()
sys.exit(0 if summary["status"] == "completed" else 1)
"""


def splice_a_history(spec: SoakSpec, sweep_dir: Path, rng: random.Random) -> tuple[str | None, list[str]]:
    """The history-splice fault, on one job of the (stopped) sweep with step checkpoints at A and
    C = A + ckpt_every: rewind it to A with train.max_steps=C (run from code, as a library user would: its
    .hydra/ stays the sweep's) — another history, whose schedule ends at C — then cut its new last.pt short.
    The next train.resume=auto must continue from A (C's checkpoint belongs to the abandoned history) and
    the job end bit-identical to the uninterrupted one; resuming from the first history's step_C would
    splice two histories. Returns the job's name (None if no job has two step checkpoints yet) and what
    went wrong."""
    import yaml

    from normlab.train.checkpoint import STEP_FILE

    targets = []
    for name, run_dir in job_dirs(sweep_dir).items():
        steps = sorted(
            int(m.group(1))
            for p in (run_dir / "checkpoints").glob("step_*.pt")
            if (m := STEP_FILE.fullmatch(p.name))
        )
        pairs = [a for a in steps if a + spec.ckpt_every in steps]
        if pairs:
            targets.append((name, run_dir, pairs))
    if not targets:
        return None, []
    name, run_dir, pairs = rng.choice(targets)
    a = rng.choice(pairs)
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    ckpt = run_dir / "checkpoints" / f"step_{a:06d}.pt"
    rewind = subprocess.run(
        [
            sys.executable,
            "-c",
            REWIND,
            str(run_dir),
            *(o for o in overrides if not o.startswith(("train.resume=", "train.max_steps="))),
            "train.num_threads=1",
            f"train.max_steps={a + spec.ckpt_every}",
            f"train.resume={ckpt}",
        ],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
    )
    if rewind.returncode != 0:
        return name, [f"{name}: the rewind to step {a} exited {rewind.returncode}: {rewind.stderr[-500:]}"]
    last = run_dir / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 3])
    return name, []


def after_the_end(
    argv: list[str], marker: str, signals: list[int], delay_s: float, timeout_s: float
) -> tuple[int | None, str]:
    """Start `python argv` in a session of its own, wait for `marker` in its output (the run's or sweep's
    last line), then `delay_s` later send `signals` (0.05 s apart) to its process group, as a Ctrl-C or a
    scheduler would; returns its exit code (None on timeout) and its output."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            time.sleep(delay_s)
            for i, signum in enumerate(signals):
                if i:
                    time.sleep(0.05)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signum)
            break
    try:
        rest, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
        return None, "".join(lines) + (rest or "")
    return proc.returncode, "".join(lines) + (rest or "")


def after_end_faults(spec: SoakSpec, workdir: Path, faulted: Path, rng: random.Random) -> list[FaultRecord]:
    """`spec.after_end` faults, alternately: one to a single run (job 0 alone, 30 steps) just after it said
    it completed, and one to the finished sweep's continue command (every job skipped) just after it said
    all its jobs are done — SIGINT or SIGTERM, once or twice, 0–1.5 s after the line. Survived when the
    command still exits 0, without a traceback, and a run's summary still says completed."""
    records = []
    for n in range(spec.after_end):
        names = rng.choice([["SIGINT"], ["SIGTERM"], ["SIGINT", "SIGINT"], ["SIGTERM", "SIGINT"]])
        delay = rng.uniform(0.0, 1.5)
        single = n % 2 == 0
        if single:
            run_dir = workdir / "after-end" / str(n)
            argv = spec.single_argv(run_dir, "train.max_steps=30")
            marker = "completed after"
        else:
            argv, marker = spec.argv(faulted, resume=True), "jobs done"
        record = FaultRecord(0, f"{AFTER_END} ({'+'.join(names)})", "run" if single else "sweep", delay)
        code, output = after_the_end(
            argv, marker, [int(signal.Signals[s]) for s in names], delay, spec.timeout_s
        )
        record.parent_exit = code
        if code != 0:
            record.problems.append(f"exit {code} (0 expected: the {record.target} had ended)")
        if "Traceback" in output or "Exception ignored" in output:
            record.problems.append("a traceback after the end: " + output[-800:])
        if single:
            try:
                status = json.loads((run_dir / "summary.json").read_text())["status"]
            except (OSError, ValueError, KeyError):
                status = None
            if status != "completed":
                record.problems.append(f"its summary.json says {status}, not completed")
        records.append(record)
    return records


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
            ref = job_dir(reference, "seed=0")
            if ref is None or comparable(training_rows(run_dir)) != comparable(training_rows(ref)):
                record.problems.append("its rows differ from the uninterrupted job's")
        return record
