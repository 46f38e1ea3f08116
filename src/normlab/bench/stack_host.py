"""The host's work per training step: a run alone against stacks of 1, 8 and 32 runs, at a shape whose
arithmetic is small, in CPU time — the proxy for a stacked sweep on a GPU, where the device waits for the
host and a stacked step's time is its host time (issue 36).

    python scripts/bench_stack.py --host                  # the table below, both head paths
    python scripts/bench_stack.py --host --members 1,8,32 --blocks 6 --block-steps 20

Every configuration trains in this process on one torch thread through the real loop (normlab.train.fit:
the step, the instrumented steps at the default metrics cadence, the rows made at each flush with each
member's monitor and its metrics.jsonl written by the real sink into a temporary folder), from step
`dense_until + 1` on (steady steps: an instrumented step every `metrics.every`), without evaluations. A
block is `--block-steps` steps of one configuration, timed by this process's CPU time
(`time.process_time`: another job on a shared machine slows the wall clock, much less the CPU time), and
the blocks run A B C … | … C B A (`--blocks` of them) so that drift hits every configuration alike; each
number is the median over blocks.

Both head paths: `fused` is the CPU's (the LM head and its loss in one chunked pass,
normlab.train.fused_head), `plain` the GPU's (the logits materialised, then the loss), forced on the CPU.

CPU time is host work plus arithmetic, and a stack does its members' arithmetic: on the CPU that is CPU
time, on a GPU the device's. So each configuration is also counted once, deterministically, in what the
host does per step whatever the machine's load: the Python function calls (`sys.setprofile`) and the torch
operator calls (torch.profiler) of `--block-steps` steps. A stack's step has no loop over its members, so
its operator calls do not grow with them and its Python calls grow only by each member's rows at a flush;
`calls ×` is a stack's calls (Python and operators together) over the run alone's — the host's work,
which is a stack's step time where the device does the arithmetic (the goal's measure), beside the CPU
time (`CPU ×`), which here includes the members' arithmetic.

How much of a stack's CPU time is that arithmetic: the table also times one run alone with the largest
stack's tokens (its batch × the members), which computes the stack's activations with one run's host work
and one model's parameters. `× one run with its tokens` is the stack against it: what stacking costs beyond
the activations' arithmetic (each member's parameters, gradients, optimizer and probes, and batched
products of small matrices where the wide run has one larger one).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHAPE = (
    "model=tiny",
    "data=synthetic",
    "data.vocab_size=258",
    "data.n_train_stories=2000",
    "data.n_val_stories=200",
    "model.d_model=16",
    "model.n_heads=2",
    "depth=2",
    "model.context_length=8",
    "train.batch_size=2",
    "train.eval_every=0",
    "logger=none",
)
GOALS = {32: 2.0, 8: 1.3}  # issue 36: a stack's step against a run alone's, on both head paths


@dataclass(frozen=True)
class Config:
    head: str  # fused | plain
    members: int  # 0: a run alone (the single-run Trainer); n: a stack of n
    # a run alone only: its batch this many times the shape's — a stack's tokens in one model, the
    # arithmetic of the stack's activations with one run's host work and parameters
    batch_times: int = 1


class Runner:
    """One configuration, ready to train `steps` more steps through the real loop."""

    def __init__(
        self,
        config: Config,
        cfgs: list[dict],
        corpus: Any,
        workdir: Path,
        device: str = "cpu",
        histograms: bool | None = None,
    ) -> None:
        import torch
        from hydra.utils import instantiate

        from normlab.metrics.sinks import JsonlSink
        from normlab.train.loop import Trainer
        from normlab.train.stacked.trainer import StackedTrainer

        where = torch.device(device)
        fused = config.head == "fused"
        size = max(config.members, 1)

        def model(cfg: dict) -> torch.nn.Module:
            torch.manual_seed(cfg["seed"])
            return instantiate(cfg["model"]).to(where)

        members = cfgs[:size]
        if config.members == 0:
            self.trainer: Any = Trainer.from_config(
                members[0],
                model(members[0]),
                corpus.train,
                corpus.val,
                where,
                fused_head=fused,
                histograms=True if histograms is None else histograms,
            )
        else:
            self.trainer = StackedTrainer(
                [model(c) for c in members],
                members,
                corpus.train,
                corpus.val,
                where,
                fused_head=fused,
                histograms=None if histograms is None else [histograms] * size,
            )
        folder = workdir / f"{config.head}-{config.members}-{config.batch_times}"
        folder.mkdir(parents=True, exist_ok=True)
        self.sinks = [JsonlSink(folder / f"{m}.jsonl", resume_step=None) for m in range(size)]
        self.trainer.step = int(members[0]["metrics"]["dense_until"]) + 1  # the steady steps

    def run(self, steps: int) -> float:
        """Train `steps` steps; returns the CPU seconds they took."""
        from normlab.train.fit import fit

        begin = time.process_time()
        fit(
            self.trainer,
            [[sink] for sink in self.sinks],
            on_member_end=lambda m, result, error: None,
            stop_at=self.trainer.step + steps,
        )
        return time.process_time() - begin

    def calls(self, steps: int) -> tuple[float, float]:
        """(Python function calls, torch operator calls) per step over `steps` steps."""
        import sys

        from torch.profiler import ProfilerActivity, profile

        count = 0

        def counter(frame: Any, event: str, arg: Any) -> None:  # noqa: ARG001
            nonlocal count
            if event == "call":
                count += 1

        sys.setprofile(counter)
        try:
            self.run(steps)
        finally:
            sys.setprofile(None)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            self.run(steps)
        ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
        return count / steps, ops / steps


def host(
    members: list[int], heads: list[str], blocks: int, block_steps: int, overrides: list[str]
) -> dict[str, Any]:
    """CPU milliseconds per step of each configuration (median over blocks) and its ratio to a run alone."""
    import torch
    from omegaconf import OmegaConf

    from normlab.config import checked
    from normlab.config.compose import compose_config
    from normlab.train.build import run_corpus

    torch.set_num_threads(1)
    settings = [*SHAPE, "train.device=cpu", f"train.max_steps={10**7}", *overrides]
    cfgs = [checked(OmegaConf.create(compose_config([*settings, f"seed={s}"]))) for s in range(max(members))]
    widest = max(members)
    batch = int(cfgs[0]["train"]["batch_size"])
    wide = checked(
        OmegaConf.create(compose_config([*settings, "seed=0", f"train.batch_size={batch * widest}"]))
    )
    corpus = run_corpus(cfgs[0], progress=False)
    configs = [Config(head, n) for head in heads for n in (0, *members)]
    if widest > 1:  # the largest stack's tokens in one run
        configs += [Config(head, 0, widest) for head in heads]
    with tempfile.TemporaryDirectory(prefix="normlab-bench-host-") as tmp:
        runners = {c: Runner(c, [wide] if c.batch_times > 1 else cfgs, corpus, Path(tmp)) for c in configs}
        for runner in runners.values():  # first calls (allocations, vmap's caches) out of the timing
            runner.run(2)
        per_step: dict[Config, list[float]] = {c: [] for c in configs}
        for block in range(blocks):
            for c in configs if block % 2 == 0 else list(reversed(configs)):
                per_step[c].append(1000 * runners[c].run(block_steps) / block_steps)
        calls = {c: runners[c].calls(block_steps) for c in configs}
    rows = []
    for c in configs:
        ms = statistics.median(per_step[c])
        alone = statistics.median(per_step[Config(c.head, 0)])
        python, ops = calls[c]
        alone_calls = sum(calls[Config(c.head, 0)])
        same_tokens = per_step.get(Config(c.head, 0, c.members)) if c.members > 1 else None
        rows.append(
            {
                "head": c.head,
                "members": c.members,
                "batch_times": c.batch_times,
                # the stack against one run with its tokens: what stacking costs beyond the activations'
                # arithmetic (the members' parameters, optimizer and probes, and the batched products)
                "same_tokens_ratio": ms / statistics.median(same_tokens) if same_tokens else None,
                "ms_per_step": ms,
                "ratio": ms / alone,
                "range": [min(per_step[c]), max(per_step[c])],
                "python_calls_per_step": python,
                "ops_per_step": ops,
                "calls_ratio": (python + ops) / alone_calls,
            }
        )
    return {"shape": list(SHAPE), "blocks": blocks, "block_steps": block_steps, "rows": rows}


def table(result: dict[str, Any], machine: str, load: float) -> str:
    """The result as a Markdown table, each stack's ratio beside the issue's goal."""
    lines = [
        f"{machine}, one thread, CPU time per step (median of {result['blocks']} blocks of "
        f"{result['block_steps']} steps; load {load}):",
        "| head | run | CPU ms per step | CPU × | × one run with its tokens | Python calls per step | "
        "operator calls per step | calls × | goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        n, times = row["members"], row.get("batch_times", 1)
        run = "alone" if n == 0 else f"stack of {n}"
        if times > 1:
            run = f"alone, batch × {times} (a stack of {times}'s tokens)"
        goal = f"≤ {GOALS[n]:g}×" if n in GOALS else ""
        same = f"{row['same_tokens_ratio']:.2f}×" if row.get("same_tokens_ratio") else ""
        lines.append(
            f"| {row['head']} | {run} | {row['ms_per_step']:.2f} | {row['ratio']:.2f}× | {same} | "
            f"{row['python_calls_per_step']:.0f} | {row['ops_per_step']:.0f} | {row['calls_ratio']:.2f}× | {goal} |"
        )
    return "\n".join(lines)
