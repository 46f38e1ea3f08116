"""What a soak runs (`SoakSpec`: N jobs, M faults, the sweep's command) and what it reports (`FaultRecord`
per fault, `SoakResult` with its one line and JSON), with the kinds of fault.

Its own module because the command line, the tests and the soak itself all start from it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
TRUNCATED_METRICS, DAMAGED_CHECKPOINT = "truncated-metrics", "damaged-checkpoint"
# a newest checkpoint whose tensor bytes are damaged while its zip index is whole (torch opens it); a job
# rewound to an older step checkpoint with a shorter schedule (another history) and its new last.pt cut short
DAMAGED_DATA, HISTORY_SPLICE = "damaged-data", "history-splice"
CONCURRENT_SWEEP, CONCURRENT_RUNS, DISK_FULL = "concurrent-sweep", "concurrent-runs", "disk-full"
AFTER_END = "after-end-signal"  # signals in the moments after a run or a sweep ended: exit code unchanged
FILE_FAULTS = (TRUNCATED_METRICS, DAMAGED_CHECKPOINT, DAMAGED_DATA, HISTORY_SPLICE, CONCURRENT_SWEEP)
TARGETS = ("parent", "group", "worker")


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
    after_end: int = 2  # signals sent just after a single run, then the finished sweep, ended
    # A continued stacked sweep restacks its stacks as they were (issue 39, point 8), so a stack that resumes
    # whole continues bit for bit. A member that a file fault sent back to another step than its stack's
    # (its newest checkpoint damaged, its rows cut short) trains in a stack of its own, and a stack's batched
    # arithmetic depends on which members it holds: equal to the uninterrupted member within float tolerance
    # (tests/test_stacked.py), not bit for bit. A stacked soak counts such a job apart
    # (`SoakResult.within_tolerance`) unless this is True (`--stacked-bit-identical`).
    stacked_bit_identical: bool = False

    file_kinds: tuple[str, ...] | None = None  # the file-fault kinds to take in turn (None: every kind)

    def file_faults(self) -> tuple[str, ...]:
        """The file-fault kinds this soak takes in turn: every kind, for either launcher, unless named."""
        return self.file_kinds or FILE_FAULTS

    def bit_identical(self) -> bool:
        """Whether every job must end bit-identical to the uninterrupted sweep (see stacked_bit_identical)."""
        return self.launcher != "stacked" or self.stacked_bit_identical

    def with_disk_full(self) -> bool:
        return (
            self.disk_full and self.bit_identical()
        )  # job 0 alone: a stack of its own, bit for bit only if demanded

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
        if self.signal.startswith(AFTER_END):
            return AFTER_END
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
    # file faults planned where no job had written the file yet and no later signal was left to go first
    # (on a loaded machine the faults can all come before a job trains): sent as signals instead
    file_faults_as_signals: int = 0
    # stacked: jobs a fault sent to a stack of their own, whose rows equal the reference's within float tolerance
    within_tolerance: int = 0

    @property
    def survived(self) -> int:
        return sum(f.survived for f in self.faults)

    @property
    def ok(self) -> bool:
        n = self.spec["jobs"]
        return (
            not self.problems
            and self.survived == len(self.faults)
            and self.completed == n
            and self.equal + self.within_tolerance == n
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
            f"of {self.spec['jobs']} jobs bit-identical to the uninterrupted sweep"
            + (
                f" and {self.within_tolerance} equal within float tolerance only (stacked: members a fault sent "
                "to a stack of their own)"
                if self.within_tolerance
                else ""
            )
            + f", {self.invocations} "
            f"invocations, {self.wall_s:.0f} s"
            + (
                f", {self.file_faults_as_signals} file fault(s) sent as signals: nothing written yet)"
                if self.file_faults_as_signals
                else ")"
            )
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["survived"] = self.survived
        data["line"] = self.line()
        return json.dumps(data, indent=2)
