"""What the soak checks in the run directories, between two invocations and at the end: every step's row
once, an interrupted job's checkpoint holding its summary's steps, configs labelled with the seed that
trained them, the steps a resume will redo, and each job's rows against the uninterrupted sweep's.

Its own module because these are the soak's verdicts: what a user would find wrong in a sweep's directory.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soak.spec import SoakSpec


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


def close(a: list[dict[str, Any]], b: list[dict[str, Any]], rel: float = 1e-4) -> bool:
    """Whether two runs' rows have the same steps and keys and values equal within `rel` (float tolerance:
    a member that trained in another stack, issue 39 point 8)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.keys() != y.keys():
            return False
        for k, v in x.items():
            w = y[k]
            if isinstance(v, float) and isinstance(w, float):
                if not math.isclose(v, w, rel_tol=rel, abs_tol=1e-6) and not (
                    math.isnan(v) and math.isnan(w)
                ):
                    return False
            elif v != w:
                return False
    return True


def final_check(spec: SoakSpec, reference: Path, faulted: Path) -> tuple[int, int, int, int, list[str]]:
    """(jobs completed, jobs equal to the reference bit for bit, jobs equal only within float tolerance —
    counted apart where `spec.bit_identical()` is False, else a problem — steps lost, problems) after the
    last resume."""
    ref, got = job_dirs(reference), job_dirs(faulted)
    problems = [f"{name}: no run directory" for name in ref if name not in got]
    completed = equal = within = lost = 0
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
        ref_rows = comparable(training_rows(ref_dir))
        same = comparable(rows) == ref_rows
        ref_summary = json.loads((ref_dir / "summary.json").read_text())
        finals = ("final_train_loss", "final_val_loss", "best_val_loss")
        same = same and all(summary.get(k) == ref_summary.get(k) for k in finals)
        equal += same
        if same:
            continue
        if (
            not spec.bit_identical()
            and not missing
            and len(steps) == len(set(steps))
            and close(comparable(rows), ref_rows)
        ):
            within += 1
            continue
        problems.append(f"{name}: rows or final losses differ from the uninterrupted sweep")
    return completed, equal, within, lost, problems


def job_dir(sweep_dir: Path, override: str) -> Path | None:
    """The run directory of the job whose overrides include `override` (None if it has none)."""
    return next((path for name, path in job_dirs(sweep_dir).items() if override in name.split()), None)
