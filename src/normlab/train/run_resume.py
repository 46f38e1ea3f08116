"""What train.resume makes of one run (`RunResume`, held by normlab.train.run.Run as `run.resume`).

Its state is declared here, field by field: the decision (normlab.train.resume — made once, by the command
line's callback before Hydra wrote anything, and handed over; decided here only for a run no callback
admitted), the summary.json a resume in the run's own directory continues, the step it resumes, and what its
checkpoints will record of the experiment. Its methods are the resume's side of a run's start and build:
the fields summary.json records of it, the corpus a resume must keep, the checkpoints of an abandoned
history retired, and a refused resume in the run's own directory leaving that directory as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.errors import UserError
from normlab.summary import SUMMARY_FILE, RunSummary, free_room
from normlab.train import checkpoint
from normlab.train import resume as resumes
from normlab.train.checkpoint import CHECKPOINT_DIR, Checkpoint
from normlab.train.logged_rows import describe_steps
from normlab.train.resume import Decision, LeftAsItWas, ResumeRefused
from normlab.train.summary_fields import resume_fields

log = logging.getLogger("normlab")


@dataclass
class RunResume:
    """train.resume for the run in `run_dir`: `decide` at its start, `adopt_corpus` at its build."""

    run_dir: Path
    decision: Decision = field(default_factory=Decision)
    # summary.json of the run this one continues in its own directory, as it was (None: not such a resume)
    previous: dict[str, Any] | None = None
    experiment: dict[str, Any] | None = None  # what its checkpoints record of the experiment
    resumed_step: int = 0  # the step of the checkpoint it continues (kept: its tensors are freed once loaded)

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint the run continues (None: it starts from step 0)."""
        return self.decision.checkpoint

    def decide(self, cfg: Mapping[str, Any]) -> None:
        """Take the decision for the checked config `cfg` (every check made); a refusal in the run's own
        directory is raised as `LeftAsItWas`."""
        self.previous = resumes.previous_summary(self.run_dir, cfg["train"]["resume"])
        try:
            self.decision = resumes.decision_for(cfg, self.run_dir)
        except UserError as e:
            raise self.refused(e) from None
        if self.checkpoint is not None:
            self.resumed_step = self.checkpoint.step

    def refused(self, e: UserError) -> UserError:
        """The error a refusal `e` ends the run with: `LeftAsItWas` where it resumes in its own directory."""
        return LeftAsItWas(e) if self.previous is not None else e

    def record_start(self, summary: RunSummary) -> None:
        """What summary.json says of a resume before training: where from, the changes allowed, the steps
        without rows it continues across (both also said on the console)."""
        if self.checkpoint is None:
            return
        summary.update(**resume_fields(self.decision))
        self.record_changes(summary, self.decision.changes)
        if self.decision.missing:
            log.warning(
                "resumed across steps without rows in metrics.jsonl (%s) on purpose: recorded in summary.json",
                describe_steps(self.decision.missing),
            )

    def record_changes(self, summary: RunSummary, changes: list[resumes.Change]) -> None:
        """Settings this resume changed on purpose (train.resume_allow), into summary.json."""
        assert self.checkpoint is not None
        for change in changes:
            summary.resume_changes.append(change.record(self.checkpoint.step))
            log.warning(
                "resumed at step %d with %s changed on purpose (%s → %s): recorded in summary.json",
                self.checkpoint.step,
                change.key,
                change.was,
                change.now,
            )

    def adopt_corpus(self, cfg: Mapping[str, Any], corpus_dir: Path, summary: RunSummary) -> bool:
        """A resumed run's corpus (cached in `corpus_dir`) must be the one its checkpoint was trained on (by
        its files' hashes; a deliberate change is recorded in `summary`); then what its checkpoints will
        record of the experiment. True when `summary` changed (the caller writes it)."""
        changed = False
        if self.checkpoint is not None:
            try:
                corpus_changes = resumes.check_corpus(
                    self.checkpoint.state.get(checkpoint.EXPERIMENT_KEY),
                    self.checkpoint.path,
                    corpus_dir,
                    cfg["train"]["resume_allow"],
                )
            except ResumeRefused as e:
                raise self.refused(e) from None
            if corpus_changes:
                self.decision.changes = [*self.decision.changes, *corpus_changes]
                self.record_changes(summary, corpus_changes)
                changed = True
        self.experiment = resumes.experiment_record(cfg, corpus_dir)
        return changed

    def retire_abandoned(self) -> None:
        """A run that goes on in its own directory from an older step than its newest checkpoints (a rewind
        with train.resume=…/step_N.pt, auto sent back by missing rows, a start again from step 0) abandons
        their history: they are retired before its first row, so nothing resumes from them (one history per
        run directory: normlab.train.checkpoint.retire)."""
        if self.decision.restart:
            checkpoint.retire(self.run_dir / CHECKPOINT_DIR, 0)
        elif self.checkpoint is not None and self.decision.in_place:
            checkpoint.retire(self.run_dir / CHECKPOINT_DIR, self.resumed_step)

    def put_back_summary(self) -> None:
        """Put back the summary.json the run directory held before this (refused) resume."""
        if self.previous is None:
            return
        free_room(self.run_dir)  # kept for a summary this run will not write
        if self.previous:
            RunSummary.from_dict(self.previous).write(self.run_dir)
        else:  # it had none: not the `running` this run may have written
            (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)
