"""Signals: the stop request on its own, and SIGTERM sent from outside to a real `python train.py`.

The end-to-end tests interrupt a run at a random moment (the child holds its rows in memory: flush_every is
larger than the run, so the stop step is never a flush boundary), resume it with the command it printed,
and compare every row with an uninterrupted run of the same settings: equal bit for bit on a CPU, with no
step missing and none twice.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from cli_run import ROOT, base_overrides

from normlab.config.compose import compose_config
from normlab.train.signals import (
    FORCE_AFTER,
    Interrupted,
    Reaction,
    StopRequest,
    exit_code,
)

# ----------------------------------------------------------------------------------------------------
# The stop request
# ----------------------------------------------------------------------------------------------------


def test_outside_the_loop_a_signal_stops_at_once():
    stop = StopRequest()
    with pytest.raises(Interrupted) as info:
        stop.handle(signal.SIGTERM)
    assert info.value.signum == signal.SIGTERM and not info.value.forced
    assert stop() and stop.signal_name == "SIGTERM"


def test_inside_the_loop_it_waits_then_a_third_signal_forces(capfd):
    stop = StopRequest()
    with stop.deferred():
        stop.handle(signal.SIGINT)
        assert stop() and stop.signum == signal.SIGINT
        stop.handle(signal.SIGTERM)  # acknowledged, ignored: the first signal is the one recorded
        assert stop.signum == signal.SIGINT
        assert FORCE_AFTER == 3
        with pytest.raises(Interrupted) as info:
            stop.handle(signal.SIGTERM)
    assert info.value.forced
    err = capfd.readouterr().err
    assert "SIGINT received: stopping after the current step" in err and "already stopping" in err


def test_handlers_are_installed_for_the_run_and_restored_after():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    stop = StopRequest()
    with stop.installed(), stop.deferred():
        assert signal.getsignal(signal.SIGTERM) == stop.handle
        os.kill(os.getpid(), signal.SIGUSR1)  # delivered to this (main) thread before kill returns
        assert stop.signum == signal.SIGUSR1
    assert {s: signal.getsignal(s) for s in before} == before


def test_the_reaction_is_looked_up_not_handled():
    assert StopRequest().reaction is None
    stop = StopRequest()
    stop.request(signal.SIGUSR1)
    assert stop.reaction is Reaction.STOP
    # how a later SIGUSR1 reaction plugs in: a mapping, the same handler
    custom = StopRequest(reactions={signal.SIGUSR1: "requeue"})  # type: ignore[dict-item]
    custom.request(signal.SIGUSR1)
    assert custom.reaction == "requeue"
    assert (exit_code(signal.SIGINT), exit_code(signal.SIGTERM), exit_code(signal.SIGUSR1)) == (130, 143, 138)


class StopAfter(StopRequest):
    """A stop request that asks for a stop after `n` steps (the reference run stops where the child did)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.polls = n, 0

    def __call__(self) -> bool:
        self.polls += 1
        if self.polls >= self.n and self.signum is None:
            self.request(signal.SIGTERM)
        return super().__call__()


# ----------------------------------------------------------------------------------------------------
# SIGTERM from outside
# ----------------------------------------------------------------------------------------------------

MAX_STEPS = 100_000  # never reached: each child is stopped long before (a step takes milliseconds)
SETTINGS = [
    f"train.max_steps={MAX_STEPS}",
    "train.flush_every=100000",  # rows stay in memory until the stop: never a flush boundary
    "train.eval_every=5",
    "train.num_threads=1",
    "metrics.every=3",
]


class Child:
    """`python train.py` in a subprocess, its output collected line by line."""

    def __init__(self, args: list[str]) -> None:
        env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.training = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "training from step" in line:  # logged where a signal already waits for a step boundary
                self.training.set()

    def stop_at_random(self, rng: random.Random) -> int:
        assert self.training.wait(timeout=240), "".join(self.lines)
        time.sleep(rng.uniform(0.3, 2.0))
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=240)
        self.reader.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def resume_command(output: str) -> list[str]:
    (line,) = [ln for ln in output.splitlines() if ln.startswith("resume with: ")]
    argv = shlex.split(line.removeprefix("resume with: "))
    assert argv[:2] == ["python", "train.py"]
    return argv[1:]


def strip_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows]


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def reference_rows(cache_dir: Path, steps: int, run_dir: Path) -> list[dict]:
    """The same settings run in this process without interruption, stopped after `steps` steps."""
    from normlab.train.run import Run

    threads = torch.get_num_threads()
    try:
        cfg = compose_config([*base_overrides([], cache_dir), *SETTINGS])
        summary = Run(cfg, run_dir, num_threads=1, stop=StopAfter(steps)).execute()
    finally:
        torch.set_num_threads(threads)
    assert summary["steps"] == steps, summary
    return read_rows(run_dir)


def interrupt_and_resume(tmp_path: Path, cache_dir: Path, interruptions: int, seed: int) -> None:
    rng = random.Random(seed)
    run_dir = tmp_path / "run"
    args = ["train.py", *base_overrides([], cache_dir), *SETTINGS, f"hydra.run.dir={run_dir}"]
    steps_seen = []
    for _ in range(interruptions):
        child = Child(args)
        code = child.stop_at_random(rng)
        out = child.output
        assert code == 143, out[-3000:]
        assert "Traceback" not in out
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM", summary
        steps = summary["steps"]
        state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
        assert state["step"] == steps
        train_steps = [r["step"] for r in read_rows(run_dir) if "loss" in r]
        assert train_steps == list(range(steps))  # no gap, no duplicate
        assert summary["final_train_loss"] is not None and summary["tokens_per_s"] > 0
        assert steps % 100000 != 0 and steps < MAX_STEPS
        steps_seen.append(steps)
        args = resume_command(out)
        assert f"train.resume={run_dir}" in args and f"hydra.run.dir={run_dir}" in args
    assert steps_seen == sorted(steps_seen) and steps_seen[-1] > 0
    expected = reference_rows(cache_dir, steps_seen[-1], tmp_path / "reference")
    assert strip_timing(read_rows(run_dir)) == strip_timing(expected)  # bit for bit


@pytest.mark.slow
def test_sigterm_from_outside_then_resume_continues_bit_for_bit(tmp_path, cache_dir):
    interrupt_and_resume(tmp_path, cache_dir, interruptions=2, seed=os.getpid())


@pytest.mark.slow
def test_sigterm_several_times_at_random_steps(tmp_path, cache_dir):
    interrupt_and_resume(tmp_path, cache_dir, interruptions=5, seed=12345 + os.getpid())


def test_resume_is_exact_with_dropout_batchnorm_accumulation_and_model_update(tmp_path, cache_dir):
    """Every state a step depends on comes back: dropout's RNG, BatchNorm's running statistics, the
    accumulation loop's data draws, DeepNet's model-update probe (post placement) and the spike windows."""
    from normlab.train.run import Run

    settings = [
        *base_overrides([], cache_dir),
        "norm=bn",
        "placement=post",
        "model.dropout=0.1",
        "train.grad_accum=2",
        "train.max_steps=9",
        "train.flush_every=4",
        "train.eval_every=3",
        "metrics.every=2",
        "spikes.window=3",
        "spikes.trend=1",
        "spikes.min_history=2",
    ]
    cfg = compose_config(settings)
    resumed_cfg = compose_config([*settings, f"train.resume={tmp_path / 'b'}"])
    threads = torch.get_num_threads()
    try:
        Run(cfg, tmp_path / "a", num_threads=1).execute()
        first = Run(cfg, tmp_path / "b", num_threads=1, stop=StopAfter(5)).execute()
        assert first["status"] == "interrupted" and first["steps"] == 5  # not a flush boundary (4, 8)
        second = Run(resumed_cfg, tmp_path / "b", num_threads=1).execute()
    finally:
        torch.set_num_threads(threads)
    assert second["status"] == "completed" and second["steps"] == 9
    rows_a, rows_b = strip_timing(read_rows(tmp_path / "a")), strip_timing(read_rows(tmp_path / "b"))
    assert "model_update" in rows_a[2] and "act_rms/layer_0" in rows_a[2]
    assert rows_b == rows_a
