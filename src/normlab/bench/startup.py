"""A run's fixed cost: wall time of `train.py ... train.max_steps=0` beyond `import torch`, and where it goes.

    python scripts/bench_startup.py                 # 5 rounds, default model (model=small), embedded corpus
    python scripts/bench_startup.py --rounds 9 model=tiny

Each round runs these fresh processes, in an order that reverses every round (A B C D E, E D C B A, …) so
a drift in machine load hits all of them alike:

- `import torch`: the floor every PyTorch program pays;
- `import torch, torch._dynamo`: what every program that trains with torch.optim pays on top (the
  optimizer imports torch._dynamo when it is built, about a second);
- `import normlab.cli`: everything train.py imports before the job starts (Hydra, normlab; W&B and the
  analysis code are imported only when used);
- `train.py … train.max_steps=0`: config composition, the token cache (built once before the rounds, so
  it is only opened), the model, the optimizer and the step-0 row — forward, backward and every gradient
  norm — metrics.jsonl, summary.json and the checkpoint (a run that made no update draws no sample).

Reported: the median wall time of each, and the medians of the differences within a round. Overrides
are passed to the train.py command (`logger=none data=synthetic` are always added); every train.py
invocation gets a fresh run directory (a directory that holds a run is refused).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds of the four commands (default 5)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for the train.py commands")
    args = p.parse_args(argv)
    env = {**os.environ, "WANDB_MODE": "offline"}
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        fresh = itertools.count()
        train = [
            py,
            "-m",
            "normlab",  # train.py's entry point, wherever the package is installed
            "data=synthetic",
            "logger=none",
            "train.max_steps=0",
            "train.progress=false",
            *args.overrides,
        ]
        commands = {
            "import torch": [py, "-c", "import torch"],
            "import torch._dynamo": [py, "-c", "import torch, torch._dynamo"],
            "import normlab.cli": [py, "-c", "import normlab.cli"],
            "max_steps=0": train,
        }

        def command(name: str) -> list[str]:
            run_dir = [f"hydra.run.dir={tmp}/run{next(fresh)}"] if name == "max_steps=0" else []
            return commands[name] + run_dir

        print("building or opening the token cache once first ...", flush=True)
        timed(command("max_steps=0"), env, tmp)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for r in range(args.rounds):
            order = list(commands) if r % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(timed(command(name), env, tmp))
            print(
                f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in commands),
                flush=True,
            )
    base = times["import torch"]

    def beyond(name: str, ref: list[float]) -> float:
        return statistics.median(t - b for t, b in zip(times[name], ref, strict=True))

    result = {
        "rounds": args.rounds,
        "overrides": args.overrides,
        "median_s": {n: statistics.median(v) for n, v in times.items()},
        "imports_beyond_torch_s": beyond("import normlab.cli", base),
        "dynamo_import_s": beyond("import torch._dynamo", base),
        "max_steps0_beyond_torch_and_dynamo_s": beyond("max_steps=0", times["import torch._dynamo"]),
        "max_steps0_beyond_torch_s": beyond("max_steps=0", base),
        "loadavg_after": os.getloadavg(),
        "times_s": times,
    }
    print("median wall time: " + ", ".join(f"{n} {v:.2f} s" for n, v in result["median_s"].items()))
    print(
        f"beyond `import torch` (median of per-round differences): imports {result['imports_beyond_torch_s']:.2f} s; "
        f"train.max_steps=0 {result['max_steps0_beyond_torch_s']:.2f} s, of which torch.optim's import of "
        f"torch._dynamo {result['dynamo_import_s']:.2f} s; "
        f"beyond `import torch, torch._dynamo`: {result['max_steps0_beyond_torch_and_dynamo_s']:.2f} s; "
        f"load average after: {', '.join(f'{v:.2f}' for v in result['loadavg_after'])}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
