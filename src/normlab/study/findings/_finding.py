"""A finding and its parts: the claim with its source and preset (`Finding`), what it measures besides its
runs (`Measurement`), the change of setup run beside it (`Perturbation`), a choice made on seeds the
verdict does not use (`Calibration`), and the error an analysis raises when the runs lack what it needs.

Its own module because it is what a finding *is* (the registry in `findings/__init__.py`, robustness and
the report read it), apart from the helpers an analysis computes with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from normlab.analysis.load import RunSet
from normlab.io import write_text_atomic
from normlab.study.verdicts import Outcome

Extras = dict[str, Any]
Drawn = list[tuple[str, str, Figure]]  # (file key, caption, figure)

PRESET_GROUP = "findings"  # the presets are configs/experiment/findings/NAME.yaml


class CannotEvaluate(ValueError):
    """The runs do not hold what a finding needs (a variant or a metric is missing)."""


# What a perturbation is to the claim (robustness.py reads it):
ROBUSTNESS = "robustness"  # a change within the claim's premise: the verdict should survive it
SCOPE = "scope"  # a change that removes the premise (Xiong's Xavier init): a flip is what theory predicts
DEPENDENCE = "dependence"  # a setup choice the source does not fix: the verdict names what it depends on
KINDS = (ROBUSTNESS, SCOPE, DEPENDENCE)


@dataclass(frozen=True)
class Perturbation:
    """One change of a preset's setup, run as a second sweep beside the preset's own (robustness.py).

    `reuse` names the runs of the preset's own sweep that the change does not touch (config key → value,
    e.g. {"norm": "ln"} when only BatchNorm's statistics change): the perturbed sweep runs only the others
    (its overrides narrow the sweep), and the perturbed verdict is computed on both together.

    `kind` says what the change is to the claim: a *robustness* change stays within the claim's premise
    (width, the depths run, a learning rate where both arms train) and a flip under it weakens the verdict;
    a *scope* change removes the premise (Xiong's theorem assumes Xavier init; GPT-2's init is not that),
    so the report states it as the claim's scope ("holds only with …, as the theory predicts"), never as a
    flip; a *dependence* is a setup choice the source does not fix (the init of a model whose paper does
    not say), and when the verdict differs under it, the verdict names the dependence with both numbers.
    `preset` names the preset's own value of what the change changes ("Xavier init, embeddings × √d"), for
    the scope and dependence sentences."""

    label: str  # how the report names it: "lr × 2 (6e-3)"
    overrides: tuple[str, ...]  # Hydra overrides added to the preset's: ("optim.lr=6e-3",)
    why: str  # why this is the setting most likely to decide the verdict
    reuse: tuple[tuple[str, str], ...] = ()  # (key, value) of the preset's runs the change leaves alone
    kind: str = ROBUSTNESS
    preset: str = ""  # the preset's own setting of what changes, in words
    setting: str = ""  # what it changes, in one or two words ("init"), for "depends on init"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a perturbation's kind is one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind != ROBUSTNESS and not (self.preset and self.setting):
            raise ValueError(f"a {self.kind} perturbation names the preset's setting and what it changes")


@dataclass(frozen=True)
class Subset:
    """A robustness variation that costs no runs: the finding re-evaluated on part of its own runs (finding
    1 on the depths from 6 up, where the depth exponent is an asymptotic statement)."""

    label: str  # how the report names it: "depths 6–24 only"
    keep: tuple[tuple[str, tuple[str, ...]], ...]  # (config key, the values kept)
    why: str


@dataclass(frozen=True)
class Calibration:
    """A choice made on runs that the verdict does not then use (a head, a learning rate, α₀): the seeds it
    ran on, the sweep that makes it (Hydra overrides on top of the preset, run by
    `scripts/reproduce.py --calibrate` into sweeps/NAME.calibration), what each arm gave when we ran it,
    and what was chosen. The preset's own seeds must not include `seeds` (tests/reproduce check it)."""

    seeds: tuple[int, ...]
    overrides: tuple[str, ...]  # e.g. ("model.tie_embeddings=true,false", "optim.lr=1e-3,5e-3", "seed=0")
    arms: str  # what each arm gave when we ran it (ours), in words with numbers
    chosen: str  # what the preset uses, and why
    # further calibration sweeps, run after the first into sweeps/NAME.calibration-2, -3, …: a choice made
    # at what an earlier one chose (DyT's α₀ at the tuned learning rate)
    then: tuple[tuple[str, ...], ...] = ()

    @property
    def sweeps(self) -> tuple[tuple[str, ...], ...]:
        """Each calibration sweep's overrides, in the order they run."""
        return (self.overrides, *self.then)


def _no_lines(result: dict[str, Any]) -> list[str]:
    return []


def _silent(line: str) -> None:
    pass


@dataclass(frozen=True)
class Measurement:
    """What a finding measures besides its sweep's runs (finding 5: the norm profiler), taken once the
    sweep has run and stored beside its runs as JSON, so that a report rebuilt from existing sweeps has
    it too; `evaluate` and `draw` find it in their extras under `key`."""

    key: str  # its name in the extras: "profile"
    file: str  # its file in the sweep directory: "profile_norm.json"
    take: Callable[[Sequence[str]], dict[str, Any]]  # the preset's overrides → a JSON-able result
    describe: Callable[[dict[str, Any]], list[str]] = _no_lines  # a few lines saying what was measured
    # False: a file another machine's run drops in beside the sweep (finding 5's GPU measurement), read
    # like one taken here but never taken by scripts/reproduce.py
    taken: bool = True


@dataclass(frozen=True)
class Finding:
    """A claim, its source, the preset that tests it (configs/experiment/findings/NAME.yaml) and its
    analysis."""

    number: int
    name: str  # the preset: configs/experiment/findings/NAME.yaml
    title: str
    claim: str
    source: str  # what a reader can check: paper, section / figure; "Observed here" for our own
    core: bool  # part of `scripts/reproduce.py --core`
    evaluate: Callable[[RunSet, Extras], Outcome]
    draw: Callable[[RunSet, Extras], Drawn]
    measurements: tuple[Measurement, ...] = ()  # taken after the sweep by scripts/reproduce.py
    ours: bool = False  # observed in this project, not a published claim
    # the change of setup most likely to decide the verdict, run as a second sweep (see robustness.py)
    perturbation: Perturbation | None = None
    calibration: Calibration | None = None  # a choice made on seeds the verdict does not use
    # a claim we put together from published ones that none of them makes for this model (finding 6)
    composite: bool = False
    # the scale of the source's own evidence, and the preset findings/paper/NAME that runs it (docs/findings)
    paper_scale: str = ""
    short: str = ""  # the claim in a few words, for the README's table
    # "can this happen here?" in one sentence, for a finding whose claim needs no precondition of its own
    can_happen: str = ""
    # the claim as the source states it: quotes, each with its location (REPORT.md's "Claim as stated")
    stated: str = ""
    subsets: tuple[Subset, ...] = ()  # robustness variations on part of the runs (no new runs)

    @property
    def preset(self) -> str:
        """Its preset as `+experiment=` names it."""
        return f"{PRESET_GROUP}/{self.name}"

    def measure(
        self, sweep_dir: str | Path, overrides: Sequence[str], echo: Callable[[str], None] = _silent
    ) -> Extras:
        """Take this finding's measurements for a sweep run with `overrides` and store each beside the
        sweep's runs; returns them as the extras `evaluate` and `draw` take. Hydra's own settings
        (hydra.launcher.n_jobs=…) mean nothing outside a Hydra run and are left out. `echo` gets the
        lines each measurement's `describe` says about its result."""
        plain = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
        extras: Extras = {}
        for m in self.measurements:
            if not m.taken:
                continue
            result = m.take(plain)
            write_text_atomic(Path(sweep_dir) / m.file, json.dumps(result, indent=2) + "\n")
            for line in m.describe(result):
                echo(line)
            extras[m.key] = result
        return extras

    def load_extras(self, sweep_dir: str | Path) -> Extras:
        """The measurements stored beside a sweep's runs (those not taken left out)."""
        extras: Extras = {}
        for m in self.measurements:
            path = Path(sweep_dir) / m.file
            if path.is_file():
                extras[m.key] = json.loads(path.read_text())
        return extras

    @property
    def paper_preset(self) -> str:
        """Its paper-scale preset as `+experiment=` names it (configs/experiment/findings/paper/NAME.yaml)."""
        return f"{PRESET_GROUP}/paper/{self.name}"

    @property
    def cite(self) -> str:
        """The source in a few words: 'Xiong et al. 2020'."""
        if self.ours:
            return "observed here"
        head = self.source.split(",")[0].split(" (")[0]
        return head.replace("*", "").strip().rstrip(".")

    def __repr__(self) -> str:
        return f"<Finding {self.number}: {self.name}>"
