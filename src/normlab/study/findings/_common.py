"""What every finding module shares: selecting runs by config value, final losses, one run's metric
series, "did these runs learn?", and the formatting of the measured tables.

Losses are final validation losses; a run that diverged counts as making no progress (its step-0
validation loss when it has one, else the unigram loss of the corpus, else NaN); runs neither completed
nor diverged (interrupted, crashed) are left out.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from normlab.analysis.estimate import Estimate, ci_label, combination, estimate
from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite, fmt_mean_std
from normlab.data.unigram import did_learn
from normlab.io import write_text_atomic
from normlab.metrics import names
from normlab.study.verdicts import CONFIDENCE, Outcome

Extras = dict[str, Any]
Drawn = list[tuple[str, str, Figure]]  # (file key, caption, figure)

SUMMARY_FILE = "summary.json"
PRESET_GROUP = "findings"  # the presets are configs/experiment/findings/NAME.yaml
EMBED_EFFECTIVE_RANK = names.EMBED_EFFECTIVE_RANK
LOGITS_LOG_Z = names.LOGIT_LOG_Z


class CannotEvaluate(ValueError):
    """The runs do not hold what a finding needs (a variant or a metric is missing)."""


# ------------------------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Perturbation:
    """One change of a preset's setup, run as a second sweep beside the preset's own (robustness.py).

    `reuse` names the runs of the preset's own sweep that the change does not touch (config key → value,
    e.g. {"norm": "ln"} when only BatchNorm's statistics change): the perturbed sweep runs only the others
    (its overrides narrow the sweep), and the perturbed verdict is computed on both together."""

    label: str  # how the report names it: "lr × 2 (6e-3)"
    overrides: tuple[str, ...]  # Hydra overrides added to the preset's: ("optim.lr=6e-3",)
    why: str  # why this is the setting most likely to decide the verdict
    reuse: tuple[tuple[str, str], ...] = ()  # (key, value) of the preset's runs the change leaves alone


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


# ------------------------------------------------------------------------------------ selecting runs


def subset(rs: RunSet, runs: Sequence[str] | pd.Index, group_by: Sequence[str] | str | None = None) -> RunSet:
    """A RunSet of some of `rs`'s runs, regrouped (None: by the keys that still vary, seeds averaged)."""
    sub_runs = rs.runs.loc[list(runs)].copy()
    sub_runs.attrs = dict(rs.runs.attrs)
    metrics = rs.metrics[rs.metrics["run"].isin(sub_runs.index)].reset_index(drop=True)
    varying = [
        k for k in rs.varying if k in sub_runs.columns and sub_runs[k].astype(str).nunique(dropna=False) > 1
    ]
    return replace(rs, runs=sub_runs, metrics=metrics, varying=varying).regroup(group_by)


def key(rs: RunSet, name: str) -> str:
    return rs.resolve_key(name)


def has_key(rs: RunSet, name: str) -> bool:
    try:
        key(rs, name)
    except Exception:
        return False
    return True


def values(rs: RunSet, name: str) -> list[Any]:
    """The distinct values of a config key among the runs that trained, numbers sorted."""
    col = rs.valid[key(rs, name)]
    uniq = list(dict.fromkeys(col.tolist()))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in uniq):
        return sorted(uniq)
    return uniq


def where(rs: RunSet, **conds: Any) -> pd.DataFrame:
    """Runs that trained with the given config values (short key names allowed: placement, depth, lr;
    `model__tie_embeddings` for a dotted key)."""
    runs = rs.valid
    mask = pd.Series(True, index=runs.index)
    for name, value in conds.items():
        col = runs[key(rs, name.replace("__", "."))]
        mask &= col.astype(str) == str(value)
    return runs[mask]


def need(rs: RunSet, name: str, wanted: Sequence[Any]) -> None:
    have = {str(v) for v in values(rs, name)} if has_key(rs, name) else set()
    missing = [str(w) for w in wanted if str(w) not in have]
    if missing:
        raise CannotEvaluate(
            f"the runs have no {name}={','.join(missing)} (found {', '.join(sorted(have)) or 'none'})"
        )


def need_metric(rs: RunSet, metric: str, what: str) -> None:
    if metric not in rs.metrics.columns or not rs.metrics[metric].notna().any():
        raise CannotEvaluate(f"no '{metric}' metric in these runs ({what})")


def group_labels(rs: RunSet, keys: Sequence[str]) -> RunSet:
    """Regroup by those of `keys` that vary (short names), falling back to the default grouping."""
    present = [k for k in keys if varies(rs, k)]
    return rs.regroup(present or None)


def varies(rs: RunSet, name: str) -> bool:
    try:
        return rs.valid[key(rs, name)].astype(str).nunique() > 1
    except Exception:
        return False


# ------------------------------------------------------------------------------------ per-run values


def summary_value(rs: RunSet, run: str, field_name: str) -> Any:
    """A summary.json field of one run: from the loaded table when the loader kept it, else read from the
    run directory (fields newer than the loader's list, such as `learned`)."""
    if field_name in rs.runs.columns:
        v = rs.runs.at[run, field_name]
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            return v
    path = rs.runs.at[run, "path"] if "path" in rs.runs.columns else None
    if not path:
        return None
    try:
        summary = json.loads((Path(path) / SUMMARY_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return summary.get(field_name) if isinstance(summary, dict) else None


def run_metric(rs: RunSet, run: str, metric: str) -> pd.Series:
    """One run's finite values of a metric, indexed by step."""
    m = rs.metrics
    if metric not in m.columns:
        return pd.Series(dtype=float)
    sub = m.loc[m["run"] == run, [names.STEP, metric]]
    s = pd.Series(finite(sub[metric]).to_numpy(), index=sub[names.STEP].to_numpy())
    return s.dropna()


def step0_val(rs: RunSet, run: str) -> float:
    v = run_metric(rs, run, names.VAL_LOSS)
    return float(v[0]) if 0 in v.index else math.nan


def unigram_loss(rs: RunSet, run: str) -> float:
    v = summary_value(rs, run, "baseline_unigram_loss")
    return float(v) if isinstance(v, numbers.Real) and math.isfinite(v) else math.nan


def end_loss(rs: RunSet, runs: pd.DataFrame) -> pd.Series:
    """Final validation loss per run; a diverged run counts as no progress (its step-0 val loss, else
    the unigram loss); other statuses (interrupted, crashed) are NaN, i.e. left out."""
    out = {}
    for run, r in runs.iterrows():
        if r["status"] == "completed" and r["final_val_loss"] is not None:
            out[run] = float(r["final_val_loss"])
        elif r["status"] == "diverged":
            v = step0_val(rs, run)
            out[run] = v if math.isfinite(v) else unigram_loss(rs, run)
        else:
            out[run] = math.nan
    return pd.Series(out, dtype=float)


def loss_of(rs: RunSet, **conds: Any) -> pd.Series:
    return end_loss(rs, where(rs, **conds))


# --------------------------------------------------------------------------------- did they learn?


def learned(rs: RunSet, run: str) -> bool | None:
    """Whether a run learned anything: summary.json's `learned` when present; else best_val_loss below
    (1 − LEARNED_MARGIN) × its `baseline_unigram_loss` (the training side's rule, `did_learn`); None when
    neither can be had. A diverged run
    without a best validation loss did not learn."""
    flag = summary_value(rs, run, "learned")
    if isinstance(flag, bool | np.bool_):
        return bool(flag)
    base = unigram_loss(rs, run)
    if not math.isfinite(base):
        return None
    best = rs.runs.at[run, "best_val_loss"]
    if best is None or not math.isfinite(float(best)):
        return False if rs.runs.at[run, "status"] in ("diverged", "completed") else None
    return did_learn(float(best), base)


def learned_count(rs: RunSet, runs: pd.DataFrame | Sequence[str]) -> str:
    """'3/3', '1/3', or '?' when the runs cannot tell."""
    ids = list(runs.index if isinstance(runs, pd.DataFrame) else runs)
    flags = [learned(rs, r) for r in ids]
    if ids and all(f is None for f in flags):
        return "?"
    return f"{sum(bool(f) for f in flags)}/{len(ids)}"


@dataclass
class LearningGate:
    """Which runs had to learn for the claim to be testable, and what they did."""

    failures: list[str] = field(default_factory=list)  # → verdict "setup failed"
    notes: list[str] = field(default_factory=list)


def require_learning(rs: RunSet, required: dict[str, pd.DataFrame | Sequence[str]]) -> LearningGate:
    """Every run of every `required` group (label → runs) must have learned; one that did not makes the
    finding's setup fail. Runs that cannot tell (no `learned`, no unigram baseline) are named in a note."""
    gate = LearningGate()
    unknown = []
    for label, runs in required.items():
        ids = list(runs.index if isinstance(runs, pd.DataFrame) else runs)
        flags = {r: learned(rs, r) for r in ids}
        failed = [r for r, f in flags.items() if f is False]
        if failed:
            best = ", ".join(fmt(_best(rs, r), 2) for r in failed)
            base = np.nanmean([unigram_loss(rs, r) for r in failed])
            line = f"{label}: {len(failed)} of {len(ids)} runs did not learn (best val loss {best}"
            line += f" vs unigram {base:.2f})" if math.isfinite(base) else ")"
            gate.failures.append(line)
        unknown += [f"{label}" for f in flags.values() if f is None][:1]
    if unknown:
        gate.notes.append(
            "Whether these runs learned cannot be told: their summary.json has neither `learned` nor "
            "`baseline_unigram_loss` (runs written before the unigram baseline existed): "
            + ", ".join(dict.fromkeys(unknown))
            + "."
        )
    return gate


def _best(rs: RunSet, run: str) -> float:
    v = rs.runs.at[run, "best_val_loss"]
    return float(v) if v is not None and math.isfinite(float(v)) else math.nan


def baseline_note(rs: RunSet) -> str | None:
    """'Unigram loss of the corpus: 5.737 nats/token.' when the runs report it."""
    vals = [unigram_loss(rs, r) for r in rs.valid.index]
    vals = [v for v in vals if math.isfinite(v)]
    if not vals:
        return None
    return (
        f"Unigram cross-entropy of the corpus (the 'learned anything?' line): {np.mean(vals):.3f} nats/token."
    )


# ------------------------------------------------------------------------------------- formatting


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None or not isinstance(v, numbers.Real) or not math.isfinite(v):  # numpy numbers too
        return "–"
    return f"{v:.{digits}f}"


def fmt_series(s: pd.Series | Sequence[float], digits: int = 3) -> str:
    """mean ± sample std over seeds."""
    v = finite(pd.Series(list(s), dtype=float)).dropna()
    if v.empty:
        return "–"
    return fmt_mean_std(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else None, digits)


def per_seed(s: pd.Series | Sequence[float], digits: int = 2) -> str:
    """The individual values, in seed order: '3.53, 3.50, 5.75'."""
    return ", ".join(fmt(float(v), digits) for v in list(s)) or "–"


CI_LABEL = ci_label(CONFIDENCE)  # how the findings name their intervals (the verdicts' level)


def diverged_count(runs: pd.DataFrame) -> str:
    return f"{int((runs['status'] == 'diverged').sum())}/{len(runs)}"


# ------------------------------------------------------------------------------ comparing arms


def by_seed(rs: RunSet, values: pd.Series) -> pd.Series | None:
    """Per-run values re-indexed by their runs' seeds (finite values only); None when they are not indexed
    by runs of `rs` or two of them share a seed."""
    if not isinstance(values, pd.Series) or "seed" not in rs.runs.columns:
        return None
    if not values.index.isin(rs.runs.index).all():
        return None
    seeds = rs.runs.loc[values.index, "seed"].astype(str)
    if seeds.duplicated().any():
        return None
    out = pd.Series(pd.to_numeric(values, errors="coerce").to_numpy(dtype=float), index=seeds.to_numpy())
    return out[np.isfinite(out.to_numpy())]


def paired(rs: RunSet, terms: Sequence[tuple[float, pd.Series]]) -> Estimate:
    """Σ wᵢ · mean(armᵢ), paired by seed where every arm ran the same seeds (issue 28): each seed's
    weighted sum, its mean over seeds with n − 1 degrees of freedom — the arms of a preset share data order
    and seeds, so pairing removes what they have in common. Otherwise (different seeds, or per-run values
    without run ids) the arms are independent groups: Welch–Satterthwaite — also where every seed's sum
    is the same number (no noise estimate), for which the unpaired interval is valid and, arms that move
    together being positively correlated, conservative."""
    unpaired = combination([(w, estimate(arm)) for w, arm in terms])
    per_seed = [by_seed(rs, arm) for _, arm in terms]
    if all(x is not None for x in per_seed):
        seeds = set(per_seed[0].index)
        if len(seeds) >= 2 and all(set(x.index) == seeds for x in per_seed):
            order = sorted(seeds)
            total = sum(w * x.reindex(order).to_numpy() for (w, _), x in zip(terms, per_seed, strict=True))
            by_pairs = estimate(total)
            if by_pairs.has_noise or not unpaired.has_noise:
                return by_pairs
    return unpaired


def compare(rs: RunSet, a: pd.Series, b: pd.Series) -> Estimate:
    """mean(a) − mean(b), paired by seed where both arms ran the same seeds, else Welch (`paired`)."""
    return paired(rs, [(1.0, a), (-1.0, b)])


def compare_by_seed(a: pd.Series, b: pd.Series) -> Estimate:
    """a − b for values already indexed by seed: paired where both have the same seeds, else Welch."""
    a, b = a.astype(float).dropna(), b.astype(float).dropna()
    unpaired = combination([(1.0, estimate(a)), (-1.0, estimate(b))])
    if len(a) >= 2 and set(a.index) == set(b.index) and a.index.is_unique and b.index.is_unique:
        by_pairs = estimate((a - b.reindex(a.index)).to_numpy())
        if by_pairs.has_noise or not unpaired.has_noise:
            return by_pairs
    return unpaired
