"""How a run ends in summary.json (`RunEnd`, a base of `normlab.train.run.Run`): `_finish`, the one place
its final fields are put together, for the loop's ending (the numbers from the loop's result) as for an
ending by an exception (`Ending`: the numbers from the rows metrics.jsonl holds, a crash's traceback), and
the command that continues it; `write_summary` writes every summary.json a run writes.

Its own module because summary.json's final fields are decided here and nowhere else, whichever way a run
(or a member of a stack, normlab.train.stacked) ends. It reads the state `Run.__init__` sets and its start
and build fill in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from normlab.config.groups import TrainConfig
from normlab.data.unigram import did_learn
from normlab.distributed import Dist
from normlab.metrics.sinks import read_rows
from normlab.summary import RunSummary
from normlab.train import checkpoint, diagnosis, flops, outcome
from normlab.train.callbacks import LoopResult
from normlab.train.checkpoint import CHECKPOINT_DIR, Checkpoint
from normlab.train.loop import Trainer
from normlab.train.outcome import Ending
from normlab.train.run_dir import METRICS_FILE
from normlab.train.signals import StopRequest

# Builds the command that continues a run: (run dir, train.resume value or None for a fresh start) → str.
ResumeCommand = Callable[[Path, "str | None"], str]


class RunEnd:
    """Run's ending: `write_summary` and `_finish` (summary.json's final fields)."""

    # set by Run.__init__ (normlab.train.run)
    cfg: dict[str, Any]
    train: TrainConfig
    run_dir: Path
    dist: Dist
    stop: StopRequest
    started: float
    summary: RunSummary
    trainer: Trainer | None
    ckpt: Checkpoint | None
    resume_command: ResumeCommand

    def write_summary(self, **fields: Any) -> RunSummary:
        self.summary.update(
            **fields, started_at=round(self.started, 3), wall_time_s=round(time.time() - self.started, 3)
        )
        if self.dist.is_main:
            self.summary.write(self.run_dir)
        if self.summary.status != "running":  # the final summary: later signals change nothing
            self.stop.settle(self.summary.status)
        return self.summary

    def _finish(
        self, ending: Ending, loop: tuple[Trainer, LoopResult, list[dict[str, Any]]] | None = None
    ) -> RunSummary:
        """Write summary.json for `ending`. Its numbers come from the loop where the loop ended the run
        (`loop`: the trainer, its result and the rows kept from before a resume), else from the rows
        metrics.jsonl holds; a crash adds its traceback."""
        fields: dict[str, Any] = {"status": ending.status, "reason": ending.reason}
        if loop is not None:
            fields.update(self._loop_fields(*loop))
        elif ending.status == "crashed":
            fields["traceback"] = ending.traceback
        else:
            fields.update(self._row_fields(ending))
        if ending.status == "interrupted":
            fields["signal"] = ending.signal
        if ending.status in ("failed", "interrupted"):
            fields["resume_command"] = self._continue_command(trained=loop is not None)
        elif loop is None and ending.status != "crashed":
            fields["resume_command"] = None
        return self.write_summary(**fields)

    def _loop_fields(
        self, trainer: Trainer, result: LoopResult, previous: list[dict[str, Any]]
    ) -> dict[str, Any]:
        losses = outcome.run_losses(previous, result.train_losses)
        numbers = outcome.after_training(
            previous,
            losses,
            result.val_losses.values(),
            result.tokens_per_s,
            self.train.flush_every,
        )
        fields = dict(
            steps=result.steps,
            diverged_at=result.diverged_at,
            final_val_loss=result.val_losses.get(result.steps) if result.status == "completed" else None,
            learned=did_learn(numbers["best_val_loss"], self.summary.baseline_unigram_loss),
            **numbers,
            **trainer.monitor.summary(),
            mfu=flops.mfu(numbers["tokens_per_s"], trainer.flops_per_token, trainer.peak_flops),
            load_avg=outcome.load_average(),
        )
        known = {
            "status": result.status,
            "baseline_unigram_loss": self.summary.baseline_unigram_loss,
            **fields,
        }
        note = diagnosis.cause(self.cfg, known, losses)
        return {**fields, "diagnosis": note.sentence if note is not None else None}

    def _row_fields(self, ending: Ending) -> dict[str, Any]:
        """The steps, and the numbers of the rows before them, of a run an exception ended: a stop before or
        without saving counts the steps the checkpoint holds; any other ending after the trainer was built
        counts its steps."""
        if ending.status == "interrupted":
            steps = self._steps()
            counted = self.ckpt is not None and not ending.forced  # what the rows of the run resumed say
            return {"steps": steps, **(self._fields_from_metrics(steps) if counted else {})}
        if self.trainer is None:
            return {}
        return {"steps": self.trainer.step, **self._fields_from_metrics(self.trainer.step)}

    def _steps(self) -> int:
        """The steps the model holds now: the trainer's, else the checkpoint's it will resume from, else 0."""
        if self.trainer is not None:
            return self.trainer.step
        return self.ckpt.step if self.ckpt is not None else 0

    def _fields_from_metrics(self, before: int) -> dict[str, Any]:
        path = self.run_dir / METRICS_FILE
        if not path.is_file():
            return {}
        try:
            lines, _ = read_rows(path)
        except OSError:
            return {}
        return outcome.from_rows([json.loads(line) for line in lines], before)

    def _continue_command(self, trained: bool) -> str | None:
        """How to continue: from this run's own checkpoint if a readable one is there (always, after the loop
        saved last.pt), else from the one it resumed; where every checkpoint there is damaged, with
        train.resume=auto, which starts the run again from step 0 (repeating the command would fail again)."""
        own = self.run_dir / CHECKPOINT_DIR
        if trained or checkpoint.newest(own) is not None:
            return self.resume_command(self.run_dir, str(self.run_dir))
        if checkpoint.candidates(own):
            return self.resume_command(self.run_dir, "auto")
        if self.ckpt is not None:
            return self.resume_command(self.run_dir, str(self.train.resume))
        return None
