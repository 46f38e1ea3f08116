"""The sentences of a report: what the numbers in its tables show, and how sure they are.

Everything here is computed from a RunSet; the wording follows fixed rules so a reader can check it:

- a difference is mean(variant) − mean(reference) of the final validation loss, in nats/token: an
  `estimate.Estimate` (Welch's standard error, Welch–Satterthwaite degrees of freedom) with its two-sided
  LEVEL (95 %) confidence interval from Student's t, formatted by `estimate.fmt_ci`, and both n shown.
  The level is two-sided 95 % because a report compares variants without a direction claimed in
  advance (the findings' 90 % intervals are those of one-sided tests of a direction a paper claims);
  report.md states it once, where it says how seeds are averaged (its effects table's CI column is
  headed with it);
- every comparison gets one reading (`reading`), used by the sentences and the tables alike:
  "worse" / "better" only when that interval excludes 0; "no clear difference" when it includes 0 (the
  sentence gives the signed difference, never a direction); "untested" when there is no noise estimate —
  one run on either side, or no spread between the runs at all — and then the sentence gives only the
  signed difference and says "untested"; "identical" when both sides hold the same values;
- runs whose summary.json says `learned: false` (best validation loss not clearly below the corpus's
  unigram baseline) are named in a warning, and every sentence about their variant says it did not learn.

Intervals are per comparison: they are not adjusted for how many comparisons a report makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from normlab.analysis import conditions
from normlab.analysis.causes import cause_lines
from normlab.analysis.estimate import LEVEL, Estimate, ci_label, difference, fmt_ci, fmt_signed
from normlab.analysis.load import RunSet, short_names
from normlab.analysis.stats import finite, learned_flags

METRIC = "final_val_loss"
METRIC_TEXT = "final validation loss"
UNIT = "nats"
CI_LABEL = ci_label(LEVEL)


# ------------------------------------------------------------------------------------------ formatting


def fmt_interval(c: Comparison, digits: int = 3) -> str:
    """'CI [+0.120, +0.280], n = 3 vs 3': the LEVEL interval (the report states the level once)."""
    return f"CI {fmt_ci(c.est, LEVEL, digits)}, n = {c.n_a} vs {c.n_b}"


IDENTICAL, UNTESTED, WORSE, BETTER, UNCLEAR = (
    "identical",
    "untested",
    "worse",
    "better",
    "no clear difference",
)


def reading(c: Comparison) -> str:
    """What a comparison may say: identical, untested (no noise estimate), worse / better (the interval
    excludes 0; lower loss is better), or no clear difference (it includes 0)."""
    if c.identical:
        return IDENTICAL
    if not c.tested:
        return UNTESTED
    if c.resolved:
        return WORSE if c.est.value > 0 else BETTER
    return UNCLEAR


def untested_note(c: Comparison) -> str:
    """'untested: n = 1 vs 3, no noise estimate' — why an untested comparison is one."""
    why = "no noise estimate" if c.single else "no spread between the runs"
    return f"untested: n = {c.n_a} vs {c.n_b}, {why}"


# ------------------------------------------------------------------------------------------ variants


@dataclass(frozen=True)
class VariantValues:
    """The metric's values of one variant's runs, and what the report must say about them."""

    variant: str
    values: tuple[float, ...]  # finite values of the metric, one per run that has it
    runs: int  # runs that trained
    diverged: int
    not_learned: int  # runs whose summary.json says learned: false
    learned_known: int  # runs that say either way

    @property
    def did_not_learn(self) -> bool:
        """Every run that says, says it did not learn."""
        return self.learned_known > 0 and self.not_learned == self.learned_known

    @property
    def mean(self) -> float:
        return float(sum(self.values) / len(self.values))


def variant_values(rs: RunSet, metric: str = METRIC) -> dict[str, VariantValues]:
    valid = rs.valid
    learned = learned_flags(valid)
    out = {}
    for variant in rs.variants:
        group = valid[valid["variant"] == variant]
        if group.empty:
            continue
        vals = finite(group[metric]).dropna() if metric in group else pd.Series(dtype=float)
        flags = learned[group.index]
        out[variant] = VariantValues(
            variant=variant,
            values=tuple(float(v) for v in vals),
            runs=len(group),
            diverged=int((group["status"] == "diverged").sum()),
            not_learned=int((flags == False).sum()),  # noqa: E712 (nullable boolean)
            learned_known=int(flags.notna().sum()),
        )
    return out


def _label(v: VariantValues) -> str:
    return f"{v.variant} (did not learn)" if v.did_not_learn else v.variant


@dataclass(frozen=True)
class Comparison:
    """mean(subject) − mean(base) of the metric: its Welch estimate, read at the report's LEVEL."""

    subject: VariantValues
    base: VariantValues

    @cached_property
    def est(self) -> Estimate:
        return difference(self.subject.values, self.base.values)

    @property
    def n_a(self) -> int:
        return len(self.subject.values)

    @property
    def n_b(self) -> int:
        return len(self.base.values)

    @property
    def single(self) -> bool:
        """One run on a side: there is no estimate of the seed noise at all."""
        return self.n_a < 2 or self.n_b < 2

    @property
    def tested(self) -> bool:
        """There is a noise estimate to test the difference against: both sides have n ≥ 2 and some
        spread (with none, the interval collapses to a point: that is no evidence of zero noise)."""
        return self.est.has_noise

    @property
    def interval(self) -> tuple[float, float]:
        """The two-sided LEVEL confidence interval (NaN, NaN when untested)."""
        return self.est.ci(LEVEL)

    @property
    def resolved(self) -> bool:
        """Tested, and the interval excludes zero."""
        lo, hi = self.interval
        return self.tested and (lo > 0 or hi < 0)

    @property
    def identical(self) -> bool:
        """Both sides hold the same values: e.g. the same network trained with the same seeds."""
        a, b = np.sort(self.subject.values), np.sort(self.base.values)
        return a.size == b.size and bool(np.allclose(a, b, rtol=1e-9, atol=0.0))


def compare(a: VariantValues, b: VariantValues) -> Comparison:
    return Comparison(a, b)


# ------------------------------------------------------------------------------------------ summary


def summary_sentences(rs: RunSet, metric: str = METRIC, budget: str | None = None) -> list[str]:
    """One or two sentences under the summary table: the lowest final loss and how far the others are;
    `budget` ('200'), where the comparison is one at a fixed budget of steps (normlab.analysis.conditions),
    says after how many."""
    vals = {k: v for k, v in variant_values(rs, metric).items() if v.values}
    if not vals:
        return [f"No run has a {METRIC_TEXT}, so nothing can be compared."]
    ranked = sorted(vals.values(), key=lambda v: v.mean)
    best = ranked[0]
    n_best = f"n = {len(best.values)}"
    if len(ranked) == 1:
        return [f"One variant with a {METRIC_TEXT}: {_label(best)}, {best.mean:.3f} {UNIT}/token ({n_best})."]
    runner = ranked[1]
    d = compare(runner, best)
    r = reading(d)
    # bold only a lowest loss that a test separates from the next: n = 1 or noise crowns no winner
    shown = f"**{_label(best)}**" if d.resolved else _label(best)
    after = f" after {budget} steps" if budget else ""
    first = f"Lowest {METRIC_TEXT}{after}: {shown}, {best.mean:.3f} {UNIT}/token ({n_best})"
    gap = f"{runner.variant} − {best.variant} = {fmt_signed(d.est.value)} {UNIT}"
    if r == IDENTICAL:
        first += f"; {runner.variant} is identical to it"
    elif d.resolved:
        first += (
            f", clearly ahead of the next, {_label(runner)}, which is {abs(d.est.value):.3f} {UNIT} higher "
            f"({runner.variant} − {best.variant}: {fmt_interval(d)})"
        )
    elif r == UNCLEAR:
        first += (
            f"; the next, {_label(runner)}, is within noise of it: {gap} ({fmt_interval(d)}), so the top two "
            "are not separated"
        )
    else:
        first += f"; the next, {_label(runner)}: {gap} ({untested_note(d)})"
    sentences = [first + "."]
    if len(ranked) > 2:
        worst = ranked[-1]
        d = compare(worst, best)
        gap = f"{worst.variant} − {best.variant} = {fmt_signed(d.est.value)} {UNIT}"
        if d.resolved:
            second = (
                f"Highest: {_label(worst)}, {abs(d.est.value):.3f} {UNIT} above {best.variant} "
                f"({worst.variant} − {best.variant}: {fmt_interval(d)})"
            )
        elif reading(d) == UNCLEAR:
            second = f"Highest: {_label(worst)}, within noise of {best.variant}: {gap} ({fmt_interval(d)})"
        else:
            second = f"Highest: {_label(worst)}: {gap} ({untested_note(d)})"
        tested = [compare(v, best) for v in ranked[1:]]
        if any(t.tested for t in tested):
            resolved = sum(t.resolved for t in tested)
            second += (
                f"; {resolved} of {sum(t.tested for t in tested)} other variants with a noise estimate are "
                "clearly above the best"
            )
        sentences.append(second + ".")
    return sentences


# ------------------------------------------------------------------------------------------ effects


@dataclass(frozen=True)
class Contrast(Comparison):
    """One level of a config key (subject) against the key's reference level (base), the other grouping
    keys held fixed."""

    key: str = ""  # config key, e.g. placement.name
    level: Any = None
    reference: Any = None
    within: dict[str, Any] = field(default_factory=dict)  # the other grouping keys' values


def _variant_keys(rs: RunSet) -> pd.DataFrame:
    """One row per variant (index) with its value of every grouping key."""
    valid = rs.valid
    if valid.empty or not rs.group_keys:
        return pd.DataFrame()
    keys = [k for k in rs.group_keys if k in valid.columns]
    return valid.groupby("variant", sort=False)[keys].first()


def contrasts(rs: RunSet, metric: str = METRIC) -> list[Contrast]:
    """For each grouping key, each of its levels against its first level (display order), within every
    combination of the other grouping keys where both variants have the metric."""
    table = _variant_keys(rs)
    vals = {k: v for k, v in variant_values(rs, metric).items() if v.values}
    order = {v: i for i, v in enumerate(rs.variants)}
    out: list[Contrast] = []
    for key in table.columns:
        levels = list(dict.fromkeys(table.sort_index(key=lambda ix: ix.map(order))[key]))
        if len(levels) < 2:
            continue
        reference = levels[0]
        others = [k for k in table.columns if k != key]
        for variant, row in table.sort_index(key=lambda ix: ix.map(order)).iterrows():
            if row[key] == reference or variant not in vals:
                continue
            match = table[(table[key] == reference)]
            for k in others:
                match = match[match[k] == row[k]]
            if match.empty or match.index[0] not in vals:
                continue
            subject, base = vals[variant], vals[match.index[0]]
            out.append(
                Contrast(
                    key=key,
                    level=row[key],
                    reference=reference,
                    within={k: row[k] for k in others},
                    subject=subject,
                    base=base,
                )
            )
    return out


def _within_text(within: dict[str, Any], display: dict[str, str]) -> str:
    return ", ".join(f"{display.get(k, k)}={v}" for k, v in within.items())


def contrast_rows(cs: Sequence[Contrast], rs: RunSet) -> list[list[str]]:
    """Rows of the effects table: key, contrast, within, difference, CI, n, reading."""
    display = short_names(list(rs.group_keys))
    rows = []
    for c in cs:
        ci = fmt_ci(c.est, LEVEL) if c.tested else "–"
        text = reading(c)
        if text == UNTESTED:
            text = "untested (n = 1)" if c.single else "untested (no spread)"
        if c.subject.did_not_learn or c.base.did_not_learn:
            text += "; did not learn"
        rows.append(
            [
                display.get(c.key, c.key),
                f"{c.level} − {c.reference}",
                _within_text(c.within, display) or "–",
                fmt_signed(c.est.value),
                ci,
                f"{c.n_a} vs {c.n_b}",
                text,
            ]
        )
    return rows


def _clause(c: Contrast, display: dict[str, str], with_ci: bool) -> str:
    """One contrast, by its `reading`, its sign that of the interval (level − reference): '-0.200 nats with
    norm=ln (post better: CI [-0.280, -0.120], n = 3 vs 3)', '+0.030 nats with norm=ln (no clear difference:
    CI […], n = 3 vs 3)', '+0.009 nats with norm=ln' (untested; `with_ci` False: the sentence says once for
    all its clauses why they are untested), 'identical with norm=ln'."""
    where = f" with {_within_text(c.within, display)}" if c.within else ""
    r = reading(c)
    if r == IDENTICAL:
        return f"identical{where}"
    value = f"{fmt_signed(c.est.value)} {UNIT}{where}"
    if r in (WORSE, BETTER):
        return f"{value} ({c.level} {r}: {fmt_interval(c)})"
    if r == UNCLEAR:
        return f"{value} (no clear difference: {fmt_interval(c)})"
    return value + (f" ({untested_note(c)})" if with_ci else "")


def contrast_sentences(cs: Sequence[Contrast], rs: RunSet) -> list[str]:
    """One sentence per grouping key: each level minus the reference, within each setting of the others,
    e.g. "**placement** — post − pre: +0.200 nats with norm=ln (post worse: CI […], n = 3 vs 3); …"; where
    no comparison of the key has a noise estimate, "post − pre: +0.200 nats with norm=ln, … (untested: one
    run on each side, no noise estimate)"."""
    display = short_names(list(rs.group_keys))
    sentences = []
    for key in dict.fromkeys(c.key for c in cs):
        of_key = [c for c in cs if c.key == key]
        differing = [c for c in of_key if not c.identical]
        untested = bool(differing) and not any(c.tested for c in differing)
        single = untested and all(c.single for c in differing)
        parts = []
        texts = dict.fromkeys(str(c.level) for c in of_key)  # by text: a missing level (NaN ≠ NaN) is one
        for level, group in ((t, [c for c in of_key if str(c.level) == t]) for t in texts):
            subject = f"{level}" + (" (did not learn)" if all(c.subject.did_not_learn for c in group) else "")
            reference = f"{group[0].reference}" + (
                " (did not learn)" if all(c.base.did_not_learn for c in group) else ""
            )
            clauses = ", ".join(_clause(c, display, with_ci=not untested) for c in group)
            parts.append(f"{subject} − {reference}: {clauses}")
        if single:
            n_runs = (
                "one run on each side" if all(c.n_a == c.n_b == 1 for c in differing) else "one run on a side"
            )
            tail = f" (untested: {n_runs}, no noise estimate)"
        elif untested:
            tail = " (untested: no spread between the runs, no noise estimate)"
        else:
            tail = ""
        sentences.append(f"**{display.get(key, key)}** — " + "; ".join(parts) + tail + ".")
    return sentences


# ------------------------------------------------------------------------------------------ warnings


def warnings(rs: RunSet, metric: str = METRIC) -> list[str]:
    """What a reader must know before reading any number: n = 1, runs that did not learn, divergence."""
    out = []
    vals = variant_values(rs, metric)
    single = [v.variant for v in vals.values() if v.runs == 1]
    if single and len(single) == len(vals):
        out.append(
            "Every variant has a single run (n = 1): there is no estimate of seed noise, so differences "
            "below come without confidence intervals and figures without bands. Run several seeds "
            "(e.g. `seed=0,1,2`) before trusting any difference."
        )
    elif single:
        out.append(
            f"{len(single)} variant(s) have a single run (n = 1): {', '.join(single)}. Differences involving "
            "them have no confidence interval."
        )
    not_learned = rs.valid[learned_flags(rs.valid) == False]  # noqa: E712 (nullable boolean)
    if not not_learned.empty:
        baseline = finite(not_learned.get("baseline_unigram_loss", pd.Series(dtype=float))).dropna()
        where = f" ({baseline.mean():.3f} {UNIT}/token)" if len(baseline) else ""
        per_variant = not_learned.groupby("variant", sort=False).size()
        listed = ", ".join(
            f"{v} ({n} of {int((rs.valid['variant'] == v).sum())})" for v, n in per_variant.items()
        )
        out.append(
            f"{len(not_learned)} run(s) did not learn — their best validation loss is not clearly below the "
            f"corpus's unigram baseline{where}: {listed}. Their numbers are not evidence about the norm or "
            "the placement, only that this setup failed to train them."
        )
    holes = rs.runs[rs.runs["rows_missing"].fillna(0) > 0] if "rows_missing" in rs.runs else rs.runs.iloc[:0]
    if not holes.empty:
        listed = ", ".join(f"{run} ({int(n)} steps)" for run, n in holes["rows_missing"].items())
        out.append(
            f"{len(holes)} run(s) have steps without a row in metrics.jsonl (a hole left by a damaged file or a "
            f"resume across it): {listed}. Their curves skip those steps and their final numbers come from the "
            "rows that are there; the Warnings section says which steps."
        )
    diverged = [v for v in vals.values() if v.diverged]
    if diverged:
        listed = ", ".join(f"{v.variant} ({v.diverged} of {v.runs})" for v in diverged)
        out.append(
            f"Runs diverged in {listed}: diverged runs have no {METRIC_TEXT}, so those variants' means "
            "cover only the runs that finished (see Diverged runs)."
        )
    out += [f"Likely cause, from the run's own config and losses — {line}" for line in cause_lines(rs)]
    return out


def report_sentences(rs: RunSet, metric: str = METRIC) -> dict[str, list[str]]:
    """Everything the report says in words: {"warnings", "conditions", "summary", "effects"} (each a list
    of sentences); "conditions": the settings the runs share and whether they had converged."""
    return {
        "warnings": warnings(rs, metric),
        "conditions": conditions.sentences(rs),
        "summary": summary_sentences(rs, metric, conditions.budget_if_fixed(rs)),
        "effects": contrast_sentences(contrasts(rs, metric), rs),
    }
