"""The end of a sweep: one line per job, the command that continues it, and the sweep's exit code.

Exit codes of `python train.py -m` (docs/errors.md, "When something goes wrong"):

- 0: the sweep finished: every job completed, diverged or was recorded invalid (now or in an earlier
  invocation) — a divergence is a result, and an invalid combination is skipped by design (`-m
  norm=deepnorm placement=pre,post`); the invalid ones are listed with their reason;
- 128 + N: the sweep was stopped by signal N (130 Ctrl-C, 143 SIGTERM): its running jobs saved, the rest
  did not start;
- 1: a job crashed (a bug: its traceback is in its summary.json and was printed);
- 2: otherwise, a job did not finish: failed (the environment), interrupted on its own, or its process died.

Every ending with a job left to run prints the sweep-resume command, which skips what finished and runs
the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from normlab.job import JobFailed
from normlab.sweeps.jobs import Job, summary_of
from normlab.sweeps.stop import say
from normlab.train.signals import exit_code, signal_name

EXIT_CRASHED = 1
EXIT_INCOMPLETE = 2

NOT_STARTED, SKIPPED, KILLED = "not started", "skipped", "killed"
DONE = ("completed", "diverged")
RECORDED = "invalid"  # a combination refused when the job started: recorded and skipped, the sweep finished


@dataclass
class JobEnding:
    """How one job of this invocation ended: `status` is a summary.json status, or one of not started,
    skipped (finished in an earlier invocation) and killed (its process died without saving)."""

    job: Job
    status: str
    detail: str
    run_dir: Path | None = None

    @property
    def finished(self) -> bool:
        return self.status in DONE or self.status in (SKIPPED, RECORDED)


def run_dir_of(job: Job, ret: JobReturn | None) -> Path | None:
    if job.run_dir is not None:
        return job.run_dir
    if ret is not None and ret.hydra_cfg is not None:
        return Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
    return None


def job_ending(job: Job, ret: JobReturn | None, launched: bool, died: int | None = None) -> JobEnding:
    """What happened to `job`: its run's summary.json, else the JobReturn's exception (a failure before any
    summary), else — for a process that died without answering — its exit status `died` (-N: signal N)."""
    run_dir = run_dir_of(job, ret)
    summary = summary_of(run_dir)
    status = summary.get("status") if summary else None
    if job.skipped:
        return JobEnding(
            job, SKIPPED, f"{status} earlier ({(summary or {}).get('steps')} steps): skipped", run_dir
        )
    if not launched:
        return JobEnding(job, NOT_STARTED, NOT_STARTED, run_dir)
    failed = ret is not None and ret.status == JobStatus.FAILED
    if failed and (isinstance(ret._return_value, JobFailed) or status in (None, "running")):
        kind = "failed" if isinstance(ret._return_value, JobFailed) else "crashed"
        return JobEnding(job, kind, f"{kind}: {ret._return_value}", run_dir)
    if ret is None and (died or status == "running"):  # its process died without answering
        how = "" if not died else f" by {signal_name(-died)}" if died < 0 else f" with exit code {died}"
        before = (
            ""
            if status in (None, "running")
            else f" (its summary.json still says: {summary_line(summary or {})})"
        )
        return JobEnding(job, KILLED, f"killed: its process ended{how} without saving{before}", run_dir)
    if summary is None:  # stopped while Hydra was still setting the job up
        return JobEnding(job, NOT_STARTED, NOT_STARTED, run_dir)
    return JobEnding(job, str(status), summary_line(summary), run_dir)


def summary_line(summary: dict[str, Any]) -> str:
    status, steps = summary.get("status"), summary.get("steps")
    if status == "completed":
        loss = summary.get("final_val_loss")
        return (
            f"completed ({steps} steps, val loss {loss:.4g})"
            if isinstance(loss, float)
            else f"completed ({steps} steps)"
        )
    if status == "interrupted":
        when = (
            "before training started"
            if "before training" in str(summary.get("reason"))
            else f"at step {steps}"
        )
        return f"interrupted by {summary.get('signal') or 'a signal'} {when}"
    return f"{status}: {summary.get('reason')}" if summary.get("reason") else str(status)


def grouped_lines(endings: Sequence[JobEnding]) -> list[str]:
    """One line per job, except that jobs which failed for the same reason (a missing corpus fails them
    all) share one line: `#0–#7 (8 jobs) — failed: …`."""
    failed: dict[str, list[JobEnding]] = {}
    for o in endings:
        if o.status == "failed":
            failed.setdefault(o.detail, []).append(o)
    lines, said = [], set()
    for o in endings:
        group = failed.get(o.detail) if o.status == "failed" else None
        if group is None or len(group) == 1:
            lines.append(f"  #{o.job.num} {o.job.label} — {o.detail}")
        elif o.detail not in said:
            said.add(o.detail)
            lines.append(f"  {job_numbers([g.job.num for g in group])} ({len(group)} jobs) — {o.detail}")
    return lines


def job_numbers(nums: Sequence[int]) -> str:
    """[0, 1, 2, 5] → '#0–#2, #5'."""
    runs: list[list[int]] = []
    for n in sorted(nums):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"#{r[0]}–#{r[-1]}" if len(r) > 2 else ", ".join(f"#{n}" for n in r) for r in runs)


def sweep_exit_code(endings: Sequence[JobEnding], stopped_by: int | None) -> int:
    if stopped_by is not None:
        return exit_code(stopped_by)
    if any(o.status == "crashed" for o in endings):
        return EXIT_CRASHED
    return 0 if all(o.finished for o in endings) else EXIT_INCOMPLETE


def report_end(
    endings: Sequence[JobEnding], sweep_dir: Path, stopped_by: int | None, continue_command: str
) -> int:
    """Print the per-job lines and the continue command (to stderr); return the sweep's exit code."""
    code = sweep_exit_code(endings, stopped_by)
    counts = Counter(o.status for o in endings)
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    if code == 0:
        invalid = [o for o in endings if o.status == RECORDED]
        if not invalid:
            say(f"[sweep] all {len(endings)} jobs done ({tally}) in {sweep_dir}")
            return code
        say(f"[sweep] finished: {tally} — {sweep_dir}")
        for o in invalid:  # refused by design or by mistake: the reason says which
            say(f"  #{o.job.num} {o.job.label} — {o.detail}")
        return code
    head = f"stopped by {signal_name(stopped_by)}" if stopped_by is not None else "not finished"
    say(f"[sweep] {head}: {tally} — {sweep_dir}")
    for line in grouped_lines(endings):
        say(line)
    if any(not o.finished for o in endings):
        say(f"continue the sweep with: {continue_command}")
    return code
