"""The start of a run (`RunStart`, a base of `normlab.train.run.Run`): the config checked, what
train.resume continues decided before anything is built, the pre-flight warnings, `running`; and at build
the corpus a resume must keep (`_adopt_corpus`), then what its checkpoints record of the experiment.

Its own module because it is the one place a run's inputs are judged — the config, the run directory's
checkpoint and rows, the corpus against the checkpoint's — each refusal before training, and a refused
resume in the run's own directory leaving it as it was (`LeftAsItWas`). It works on the state `Run.__init__`
sets, and says `running` with `RunEnd.write_summary` (normlab.train.run_end).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normlab.config import checked
from normlab.config.environment import from_environment
from normlab.config.groups import TrainConfig
from normlab.data import TokenCorpus
from normlab.errors import UserError
from normlab.summary import RunSummary
from normlab.train import checkpoint, diagnosis
from normlab.train import resume as resumes
from normlab.train.checkpoint import Checkpoint
from normlab.train.logged_rows import describe_steps
from normlab.train.resume import Decision, LeftAsItWas, ResumeRefused

log = logging.getLogger("normlab")


class RunStart:
    """Run's start: `_start` (the config, the resume decision, `running`) and `_adopt_corpus` (at build)."""

    # set by Run.__init__ (normlab.train.run)
    cfg_node: DictConfig | Mapping[str, Any]
    cfg: dict[str, Any]
    train: TrainConfig
    run_dir: Path
    summary: RunSummary
    ckpt: Checkpoint | None
    restart: bool
    decision: Decision
    previous: dict[str, Any] | None
    experiment: dict[str, Any] | None
    resumed_step: int

    def _start(self) -> bool:
        """Check the config and decide what train.resume continues (every check made), then say `running`;
        False when train.resume=auto finds the run finished (its summary.json stays as it is)."""
        self._echo_config()
        self.cfg = checked(self.cfg_node)
        for key in ("name", "experiment_name"):  # labels: shown, logged and sent as written
            if key in self.environment:
                self.cfg[key] = self.environment[key][1]
        self.train = TrainConfig.of(self.cfg["train"])
        self._echo_config()
        self._preflight()
        # a resume of the run in this directory that is refused leaves it as it was
        self.previous = resumes.previous_summary(self.run_dir, self.train.resume)
        try:
            self.decision = resumes.decision_for(self.cfg, self.run_dir)
        except UserError as e:
            raise LeftAsItWas(e) if self.previous is not None else e from None
        if self.decision.skip:
            self.summary = RunSummary.read(self.run_dir)
            return False
        # starting again drops the rows of a run that saved no checkpoint
        self.restart = self.decision.restart
        self.ckpt = self.decision.checkpoint
        if self.ckpt is not None:
            self.resumed_step = self.ckpt.step
            before = self.decision.previous or {}  # what earlier resumes of this run recorded
            self.summary.update(
                resumed_from=f"{self.ckpt.path} (step {self.ckpt.step})",
                resume_changes=list(before.get("resume_changes") or []),
                missing_steps=[*(before.get("missing_steps") or []), *map(list, self.decision.missing)],
            )
            self._record_changes(self.decision.changes)
            if self.decision.missing:
                log.warning(
                    "resumed across steps without rows in metrics.jsonl (%s) on purpose: recorded in summary.json",
                    describe_steps(self.decision.missing),
                )
        self.write_summary(status="running")
        return True

    def _adopt_corpus(self, corpus: TokenCorpus) -> None:
        """A resumed run's corpus must be the one its checkpoint was trained on (by its files' hashes; a
        deliberate change is recorded); then what its checkpoints will record of the experiment."""
        if self.ckpt is not None:
            try:
                corpus_changes = resumes.check_corpus(
                    self.ckpt.state.get(checkpoint.EXPERIMENT_KEY),
                    self.ckpt.path,
                    corpus.cache_dir,
                    self.train.resume_allow,
                )
            except ResumeRefused as e:
                raise LeftAsItWas(e) if self.previous is not None else e from None
            if corpus_changes:
                self.decision.changes = [*self.decision.changes, *corpus_changes]
                self._record_changes(corpus_changes)
                self.write_summary()
        self.experiment = resumes.experiment_record(self.cfg, corpus.cache_dir)

    def _record_changes(self, changes: list[resumes.Change]) -> None:
        """Settings this resume changed on purpose (train.resume_allow), into summary.json."""
        assert self.ckpt is not None
        for change in changes:
            self.summary.resume_changes.append(change.record(self.ckpt.step))
            log.warning(
                "resumed at step %d with %s changed on purpose (%s → %s): recorded in summary.json",
                self.ckpt.step,
                change.key,
                change.was,
                change.now,
            )

    def _preflight(self) -> None:
        """Say, before anything is built, which known failure this setup matches (normlab.train.diagnosis):
        one warning line each, kept in summary.json's `preflight`."""
        notes = [n.sentence for n in diagnosis.preflight(self.cfg)]
        for sentence in notes:
            log.warning("pre-flight: %s", sentence)
        self.summary.update(preflight=notes)

    def _echo_config(self) -> None:
        """Copy the config's identity (norm, placement, depth, ...) into the summary, as far as it resolves."""
        if self.cfg:
            cfg = self.cfg
        else:
            try:
                cfg = (
                    OmegaConf.to_container(self.cfg_node, resolve=True)
                    if OmegaConf.is_config(self.cfg_node)
                    else dict(self.cfg_node)
                )
            except Exception:  # an unresolvable value: the check reports it
                return

        def pick(group: str) -> Any:
            value = cfg.get(group)
            return value.get("name") if isinstance(value, Mapping) else value

        def echo(key: str, value: Any) -> Any:  # a value from the environment, as the config writes it
            return self.environment[key][1] if key in self.environment else value

        self.summary.update(
            norm=echo("norm.name", pick("norm")),
            placement=echo("placement.name", pick("placement")),
            depth=echo("depth", cfg.get("depth")),
            warmup_steps=echo("warmup_steps", cfg.get("warmup_steps")),
            seed=echo("seed", cfg.get("seed")),
            name=echo("name", cfg.get("name")),
        )

    @property
    def environment(self) -> dict[str, tuple[Any, str]]:
        """The settings whose values come from ${oc.env:…} (config.environment), worked out once."""
        if getattr(self, "_environment", None) is None:
            self._environment = from_environment(self.cfg_node)
        return self._environment
