"""What a run says while it trains: a line every `train.log_every` steps, and a bar on a terminal.

Both are training-loop callbacks (normlab.train.callbacks) fed by the rows as they reach the host (every
train.flush_every steps): nothing here adds work or a device sync to the loop. Speeds come from the rows'
own `tokens_per_s` — wall time measured over each flush window of real training steps — so the seconds
per step, the ETA and the bar's rate are those of the steps this run just made:

    [ln-post-L6-w100-s0] step 100/2000 (5%) · loss 3.412 · lr 3.00e-03 · grad norm 0.84 · 12,345 tok/s · 0.09 s/step · ETA 2.9 min

`ProgressLog` writes that line to the run's log: train.log always, the console too unless a bar is drawn
there or the run is one of several a sweep runs side by side (their sweep prints one line for all of them,
normlab.sweeps.live). With `hint`, the first block of rows also says how long a step takes and the whole
run will take — measured on the first real steps, replacing a timed benchmark before training — and, above
SLOW_STEP_S on a model bigger than model=tiny, how many times fewer FLOPs the tiny preset needs. Rows reach
the host every train.flush_every steps, so on a slow model (seconds a step on a CPU) that first block can
take a minute: after WAITING_S without a row such a run says that it is on its first steps and how long a
step takes at least, rather than stay silent (a timer beside the loop: nothing is added to the loop).
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from normlab.metrics import names
from normlab.train import step_time
from normlab.train.callbacks import Callback, LoopResult

if TYPE_CHECKING:
    from normlab.train.loop import Trainer

log = logging.getLogger("normlab")

SLOW_STEP_S = 1.0  # above this, a CPU user is pointed at model=tiny
SMOOTHING = 0.3  # weight of the newest flush window in the seconds-per-step average
WAITING_S = 15.0  # a run typed at the command line says it is on its first steps when they take this long


def fmt_step(seconds: float) -> str:
    """'0.29 s', '12 ms' (a tiny model's step)."""
    return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.2f} s"


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class StepClock:
    """Seconds per optimizer step from the rows' tokens_per_s: the latest flush window, and a smoothed
    average of the windows (what the ETA uses)."""

    def __init__(self, tokens_per_step: int) -> None:
        self.tokens_per_step = tokens_per_step
        self.latest: float | None = None
        self.average: float | None = None
        self._window: float | None = None  # the tokens_per_s of the window being read

    def observe(self, row: Mapping[str, Any]) -> None:
        tps = row.get(names.TOKENS_PER_S)
        if not isinstance(tps, int | float) or not tps > 0 or tps == self._window:
            return  # rows of one flush window share its tokens_per_s: count each window once
        self._window = float(tps)
        self.latest = self.tokens_per_step / float(tps)
        self.average = (
            self.latest if self.average is None else SMOOTHING * self.latest + (1 - SMOOTHING) * self.average
        )

    def eta(self, steps_left: int) -> float:
        return steps_left * self.average if self.average is not None else math.nan


def progress_line(name: str, row: Mapping[str, Any], max_steps: int, clock: StepClock) -> str:
    """'[name] step 100/2000 (5%) · loss 3.412 · lr 3.00e-03 · grad norm 0.84 · 12,345 tok/s · 0.09 s/step ·
    ETA 2.9 min' for the row of step `row["step"]` (steps done: step + 1)."""
    done = int(row[names.STEP]) + 1
    parts = [f"[{name}] step {done}/{max_steps} ({done / max(max_steps, 1):.0%})"]
    for key, label, fmt in (
        (names.LOSS, "loss", "{:.3f}"),
        (names.LR, "lr", "{:.2e}"),
        (names.GRAD_NORM, "grad norm", "{:.3g}"),
        (names.TOKENS_PER_S, "", "{:,.0f} tok/s"),
    ):
        v = row.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            parts.append(f"{label} {fmt.format(v)}".strip())
    if clock.average is not None:
        parts.append(f"{fmt_step(clock.average)}/step")
        parts.append(f"ETA {fmt_duration(clock.eta(max_steps - done))}")
    return " · ".join(parts)


def file_only(record: logging.LogRecord) -> None:
    """Hand a record to the root logger's file handlers only (train.log), not to the console."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and record.levelno >= handler.level:
            handler.handle(record)


class ProgressLog(Callback):
    """One progress line every `every` steps and at the last step (module docstring). `console` False
    keeps the lines in train.log; `hint` says the measured step time and the run's length after the first
    rows; `tiny_flops_ratio` (this model's FLOPs per step over model=tiny's, None when it is tiny) adds the
    tiny preset to a slow hint."""

    def __init__(
        self,
        name: str,
        max_steps: int,
        every: int,
        tokens_per_step: int,
        *,
        console: bool = True,
        hint: bool = False,
        tiny_flops_ratio: float | None = None,
        first_block: int = 0,
        waiting_s: float = WAITING_S,
    ) -> None:
        self.name, self.max_steps, self.every = name, max_steps, every
        self.console, self.hint, self.tiny_flops_ratio = console, hint, tiny_flops_ratio
        self.clock = StepClock(tokens_per_step)
        self.first: int | None = None  # the first step this process trained (a resume starts later)
        # with `hint` and `first_block` (train.flush_every): one line if the first rows keep us waiting
        self.first_block, self.waiting_s = first_block, waiting_s
        self._waiting: threading.Timer | None = None
        if hint and first_block > 1:
            self._waiting = threading.Timer(waiting_s, self._still_waiting)
            self._waiting.daemon = True
            self._waiting.start()

    def _still_waiting(self) -> None:
        n, waited = self.first_block, self.waiting_s
        self.emit(
            f"training: the first {n} steps are under way ({waited:.0f} s so far: at least "
            f"{fmt_step(waited / n)} for each of these first steps, which are measured in full and run slower); "
            f"the step time and the run's length follow once they are done (train.flush_every={n} steps a block)"
        )

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None

    def emit(self, message: str, level: int = logging.INFO) -> None:
        if self.console:
            log.log(level, message)
        else:
            file_only(log.makeRecord(log.name, level, __file__, 0, message, None, None))

    def on_step(self, row: dict[str, Any]) -> None:
        self.clock.observe(row)
        step = int(row[names.STEP])
        if self.first is None:
            self._stop_waiting()
            self.first = step
            if self.hint and self.clock.latest is not None:
                for line in self.hint_lines(step):
                    self.emit(line)
        done = step + 1
        if self.every and (done % self.every == 0 or done == self.max_steps):
            self.emit(progress_line(self.name, row, self.max_steps, self.clock))

    def hint_lines(self, first: int) -> list[str]:
        """The step time measured on the first flush window of real steps, and what it means for the run."""
        seconds = self.clock.latest or math.nan
        left = self.max_steps - first
        lines = [
            f"step time measured on the first steps: {fmt_step(seconds)} a step, so the {left} steps to go "
            f"take about {fmt_duration(seconds * left)} (the first steps are measured in full and run slower; "
            "the progress lines refine it)"
        ]
        if seconds > SLOW_STEP_S and self.tiny_flops_ratio and self.tiny_flops_ratio > 1.5:
            lines.append(
                f"that is slow for a CPU: model=tiny (d_model 64, context 64) needs {self.tiny_flops_ratio:.0f}× "
                "fewer FLOPs a step — add model=tiny, or use a GPU"
            )
        return lines

    def on_end(self, result: LoopResult) -> None:
        self._stop_waiting()


class ProgressBar(Callback):
    """A tqdm bar over the steps, its rate and ETA from the rows' real step times (not from when the rows
    arrive, every train.flush_every steps), with the last loss; `enabled` False draws nothing."""

    FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"

    def __init__(self, max_steps: int, start: int, desc: str, enabled: bool, tokens_per_step: int) -> None:
        self.max_steps = max_steps
        self.clock = StepClock(tokens_per_step)
        self.bar = tqdm(
            total=max_steps,
            initial=start,
            disable=not enabled,
            desc=desc,
            unit="step",
            dynamic_ncols=True,
            bar_format=self.FORMAT,
        )

    def on_step(self, row: dict[str, Any]) -> None:
        self.clock.observe(row)
        done = min(int(row[names.STEP]) + 1, self.max_steps)
        self.bar.n = done
        postfix = f"loss {row[names.LOSS]:.3f}"  # tqdm puts ", " before it
        if self.clock.average is not None:
            left = self.clock.eta(self.max_steps - done)
            postfix += f", {fmt_step(self.clock.average)}/step, ETA {fmt_duration(left)}"
        self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.refresh()

    def on_end(self, result: LoopResult) -> None:
        self.bar.close()


def bar_wanted(setting: bool | str, side_by_side: bool) -> bool:
    """train.progress: `auto` draws the bar on a terminal, unless the run is one of several a sweep runs side
    by side (their sweep prints one line for all of them)."""
    if setting == "auto":
        return sys.stderr.isatty() and not side_by_side
    return bool(setting)


def progress_callbacks(
    cfg: Mapping[str, Any], trainer: Trainer, bar: bool, side_by_side: bool, hint: bool
) -> list[Callback]:
    """The bar (`bar`: on a terminal) and the progress lines of the run `cfg` describes: the lines reach the
    console only where no bar is drawn and the run is not one of a parallel sweep's; `hint`: say how long a
    step takes (a run typed at the command line), on the CPU with the FLOPs model=tiny would save."""
    name, train = cfg["name"], cfg["train"]
    max_steps, per_step = train["max_steps"], trainer.tokens_per_step
    lines = ProgressLog(
        name,
        max_steps,
        train["log_every"],
        per_step,
        console=not bar and not side_by_side,
        hint=hint and trainer.step < max_steps,
        tiny_flops_ratio=step_time.tiny_flops_ratio(cfg) if trainer.device.type == "cpu" else None,
        first_block=train["flush_every"],
    )
    return [ProgressBar(max_steps, trainer.step, name, bar, per_step), lines]
