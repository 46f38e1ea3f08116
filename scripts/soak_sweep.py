"""Fault-injection soak of a local sweep: N jobs, M random SIGINT / SIGTERM / SIGKILL to the sweep's parent,
its process group or one job, the sweep-resume command after each, and at the end every job checked
against an uninterrupted sweep (tools/soak/ has the details).

    python scripts/soak_sweep.py                                  # N=8 jobs × 1200 steps, M=16 faults
    python scripts/soak_sweep.py --jobs 3 --faults 3 --steps 600  # a small one
    python scripts/soak_sweep.py --launcher stacked               # the same faults to a stacked sweep
    python scripts/soak_sweep.py --workdir outputs/soak --json soak.json

Besides signals, about a third of the M faults are file faults between invocations (a metrics.jsonl cut
mid-row, a newest checkpoint cut short or its tensor data damaged, a job rewound into another history with
its new last.pt cut short, the continue command started twice at once); then pairs of single runs started
together into one directory, signals just after a single run and the finished sweep ended, and, as root (a
tmpfs is mounted), a full disk.

Prints one line per fault and the result line, e.g. `faults survived: 19 of 19 (signal 10/10, …), steps
lost: 0, mislabelled configs: 0 (…)`; exits 1 if any fault was not survived, a job did not complete or
differs from the uninterrupted sweep, or a config was mislabelled.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # the soak sits beside the library
from soak.run import soak  # noqa: E402
from soak.spec import SoakSpec  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=8, help="N: jobs in the sweep (seed=0..N-1)")
    p.add_argument("--faults", type=int, default=16, help="M: faults to inject")
    p.add_argument("--steps", type=int, default=1200, help="train.max_steps of each job")
    p.add_argument("--parallel", type=int, default=2, help="hydra.launcher.n_jobs")
    p.add_argument(
        "--ckpt-every", type=int, default=50, help="train.ckpt_every (what a SIGKILL'd job resumes from)"
    )
    p.add_argument(
        "--max-delay",
        type=float,
        default=10.0,
        help="a fault comes 0.5..this many seconds into an invocation (at most 1.5 × the reference "
        "sweep's wall time / faults, so that all faults land before the sweep is done)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    p.add_argument(
        "--file-share",
        type=float,
        default=0.35,
        help="share of the M faults that are file faults (0 = signals only)",
    )
    p.add_argument(
        "--concurrent-runs",
        type=int,
        default=2,
        help="pairs of single runs started together into one directory",
    )
    p.add_argument(
        "--no-disk-full", action="store_true", help="leave out the full-disk fault (it needs root)"
    )
    p.add_argument(
        "--after-end",
        type=int,
        default=2,
        help="signals just after the command ended: alternately to a single run and to the finished sweep",
    )
    p.add_argument(
        "--stacked-bit-identical",
        action="store_true",
        help="--launcher stacked: require every job bit-identical, also a member a fault sent to a stack of its "
        "own; without it a job equal within float tolerance only is counted apart",
    )
    p.add_argument(
        "--launcher",
        choices=("joblib", "stacked"),
        default="joblib",
        help="hydra/launcher: the process pool, or stacked (--parallel stacks of the jobs as one model each)",
    )
    p.add_argument(
        "--workdir", type=Path, default=None, help="where the two sweeps go (default: a temporary folder)"
    )
    p.add_argument("--json", type=Path, default=None, help="also write the full result as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="normlab-soak-"))
    spec = SoakSpec(
        workdir=workdir,
        jobs=args.jobs,
        faults=args.faults,
        steps=args.steps,
        parallel=args.parallel,
        ckpt_every=args.ckpt_every,
        delay_s=(0.5, args.max_delay),
        seed=args.seed,
        file_share=args.file_share,
        concurrent_runs=args.concurrent_runs,
        disk_full=not args.no_disk_full,
        launcher=args.launcher,
        after_end=args.after_end,
        stacked_bit_identical=args.stacked_bit_identical,
    )
    print(f"soak in {workdir} (sweep output: {workdir / 'soak.log'})", flush=True)
    result = soak(spec)
    for f in result.faults:
        state = (
            "survived"
            if f.survived
            else "NOT survived: "
            + "; ".join(
                f.problems
                + [f"alive after the parent: {f.lingering}"] * bool(f.lingering)
                + [f"started after the signal: {f.started_after}"] * bool(f.started_after)
            )
        )
        where = (
            f"{f.signal:7s} to the {f.target:6s} {f.after_s:5.1f} s in, sweep exit {f.parent_exit}"
            if f.kind == "signal"
            else f"{f.signal} ({f.target})"
        )
        print(f"fault {f.n:2d}: {where}: {state}")
    for problem in result.problems:
        print(f"problem: {problem}")
    print(result.line())
    if args.json:
        args.json.write_text(result.to_json())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
