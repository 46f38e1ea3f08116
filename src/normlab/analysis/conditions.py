"""What a report's comparison holds under, said at its top: the settings its runs share (`shared_settings`)
and whether their validation loss had levelled off by the end (`convergence`).

A difference between two variants is a fact about one setup — one model size, head tying, learning rate,
warm-up, budget and corpus. Post-LN ahead of Pre-LN with an untied head after 200 steps says nothing of a
tied head (where Post-LN can stall at the unigram loss, finding 10) or of 20,000 steps. So the report names
the settings every run shares before any number, and says whether the runs had converged:

- the change of each run's validation loss over the last quarter of its training (from its last evaluation
  at or before 75 % of the steps to its final one), averaged over a variant's seeds with the report's
  interval (`estimate.LEVEL`, Student's t): **still falling** where the interval lies below 0 and
  reaches past −LEVELLED_NATS, **levelled off** where it lies within ±LEVELLED_NATS, **rising** where it
  lies above 0 and reaches past +LEVELLED_NATS, **undecided** otherwise; one run (or no spread) reads its
  point value, marked untested;
- any variant still falling makes the whole comparison one "at a fixed budget of N steps": longer
  training can change it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from normlab.analysis.estimate import LEVEL, estimate, fmt_signed
from normlab.analysis.load import SEED_KEY, RunSet, short_names
from normlab.analysis.stats import finite, fmt_params
from normlab.metrics import names

LEVELLED_NATS = 0.01  # a change over the last quarter smaller than this: the loss has levelled off
LAST_SHARE = 0.25  # "the end": the last quarter of the steps

FALLING, LEVELLED, RISING, UNDECIDED = "still falling", "levelled off", "rising", "undecided"


# ------------------------------------------------------------------------------------------ settings


def _shared(runs: pd.DataFrame, key: str) -> Any:
    """The one value every run has for `key`, or None where runs differ or none has it."""
    if key not in runs:
        return None
    values = runs[key].dropna()
    if values.empty:
        return None
    distinct = {str(v) for v in values}
    return values.iloc[0] if len(distinct) == 1 else None


def _num(x: Any) -> str:
    """0.003 → '0.003', 3e-05 → '3e-05', 64 → '64', 1.0 → '1'."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    return f"{f:g}"


def _model(runs: pd.DataFrame) -> str | None:
    parts = []
    for key, fmt in (
        ("model.d_model", "d_model {}"),
        ("depth", "{} blocks"),
        ("model.n_heads", "{} heads"),
        ("model.context_length", "context {}"),
    ):
        value = _shared(runs, key)
        if value is not None:
            parts.append(fmt.format(_num(value)))
    params = finite(runs["n_params"]).dropna() if "n_params" in runs else pd.Series(dtype=float)
    if len(params) and params.max() <= 1.05 * params.min():  # variants may differ by a norm's few weights
        parts.append(f"{'≈' if params.max() != params.min() else ''}{fmt_params(params.mean())} parameters")
    return f"model {', '.join(parts)}" if parts else None


def _head(runs: pd.DataFrame) -> str | None:
    tied = _shared(runs, "model.tie_embeddings")
    if tied is None:
        return None
    tied = str(tied).lower() == "true"
    return (
        "LM head tied to the token embedding (model.tie_embeddings=true)"
        if tied
        else "LM head untied (model.tie_embeddings=false)"
    )


def _init(runs: pd.DataFrame) -> str | None:
    init, scale = _shared(runs, "model.init"), _shared(runs, "model.embed_scale")
    if init is None:
        return None
    return f"init {init}" + (f", embed_scale {_num(scale)}" if scale is not None else "")


def _optimiser(runs: pd.DataFrame) -> str | None:
    lr = _shared(runs, "optim.lr")
    if lr is None:
        return None
    text = f"lr {_num(lr)}"
    schedule, floor = _shared(runs, "schedule.name"), _shared(runs, "optim.min_lr")
    if schedule is not None:
        text += f" ({schedule} schedule" + (f" to {_num(floor)})" if floor is not None else ")")
    decay, clip = _shared(runs, "optim.weight_decay"), _shared(runs, "train.grad_clip")
    if decay is not None:
        text += f", weight decay {_num(decay)}"
    if clip is not None:
        text += f", gradient clipping at {_num(clip)}" if float(clip) > 0 else ", no gradient clipping"
    return text


def _budget(runs: pd.DataFrame) -> str | None:
    steps, warmup = _shared(runs, "train.max_steps"), _shared(runs, "warmup_steps")
    batch, seq = _shared(runs, "train.batch_size"), _shared(runs, "train.seq_len")
    accum = _shared(runs, "train.grad_accum")
    parts = []
    if steps is not None:
        parts.append(
            f"warm-up {_num(warmup)} of {_num(steps)} steps" if warmup is not None else f"{_num(steps)} steps"
        )
    if batch is not None and seq is not None:
        times = f" × {_num(accum)} accumulated" if accum is not None and float(accum) > 1 else ""
        parts.append(f"batch {_num(batch)} × {_num(seq)} tokens{times}")
    return ", ".join(parts) or None


def _data(runs: pd.DataFrame) -> str | None:
    name, vocab = _shared(runs, "data.name"), _shared(runs, "data.vocab_size")
    if name is None:
        return None
    return f"data={name}" + (f" (vocab {_num(vocab)})" if vocab is not None else "")


def _group(key: str, label: str) -> Callable[[pd.DataFrame], str | None]:
    def shared(runs: pd.DataFrame) -> str | None:
        value = _shared(runs, key)
        return None if value is None else f"{label}={value}"

    return shared


# the settings a comparison depends on, in the order a reader checks them
SETTINGS: tuple[Callable[[pd.DataFrame], str | None], ...] = (
    _model,
    _group("norm", "norm"),
    _group("placement", "placement"),
    _head,
    _init,
    _optimiser,
    _budget,
    _data,
)


def shared_settings(rs: RunSet) -> list[str]:
    """The settings every run that trained shares, as phrases ('LM head untied (model.tie_embeddings=false)')."""
    runs = rs.valid
    if runs.empty:
        return []
    return [text for text in (setting(runs) for setting in SETTINGS) if text]


def conditions_sentence(rs: RunSet) -> str | None:
    """'These runs differ in placement (and seed); everything else is the same: …' — None with no run that
    trained."""
    shared = shared_settings(rs)
    if not shared:
        return None
    display = short_names(rs.group_keys)
    compared = ", ".join(display[k] for k in rs.group_keys) or "nothing but the seed"
    seeds = " (and seed)" if rs.group_keys and SEED_KEY in rs.runs and rs.runs[SEED_KEY].nunique() > 1 else ""
    return (
        f"These runs differ in {compared}{seeds} and share everything else: {'; '.join(shared)}. Every "
        "difference below holds under these settings; another model size, head tying, learning rate, "
        "warm-up, budget or corpus can change it."
    )


# ------------------------------------------------------------------------------------------ convergence


@dataclass(frozen=True)
class Tail:
    """One variant's validation loss over the last quarter of its training: the mean change (final − the
    evaluation at or before 75 % of the steps) over its runs, with the report's interval where it has one."""

    variant: str
    change: float
    interval: tuple[float, float] | None  # None: one run, or no spread (untested)
    n: int
    start: int  # the reference evaluation's step (of the first run)
    end: int  # the final evaluation's step

    @property
    def state(self) -> str:
        if self.interval is None:
            lo = hi = self.change
        else:
            lo, hi = self.interval
        if lo >= -LEVELLED_NATS and hi <= LEVELLED_NATS:
            return LEVELLED
        if hi < 0 and lo < -LEVELLED_NATS:
            return FALLING
        if lo > 0 and hi > LEVELLED_NATS:
            return RISING
        return UNDECIDED

    def text(self) -> str:
        """'`pre` -0.124 nats (step 150 → 200, CI [-0.130, -0.118], n = 3)'."""
        if self.interval is None:
            sure = f"n = {self.n}, untested"
        else:
            lo, hi = self.interval
            sure = f"CI [{lo:+.3f}, {hi:+.3f}], n = {self.n}"
        return f"`{self.variant}` {fmt_signed(self.change)} nats (step {self.start} → {self.end}, {sure})"


def _run_tail(rows: pd.DataFrame) -> tuple[float, int, int] | None:
    """(final − reference validation loss, reference step, final step) of one run's evaluations."""
    evals = rows.dropna(subset=[names.VAL_LOSS]).sort_values(names.STEP)
    if len(evals) < 2:
        return None
    end = int(evals[names.STEP].iloc[-1])
    earlier = evals[evals[names.STEP] <= (1 - LAST_SHARE) * end]
    if earlier.empty:
        return None
    start = int(earlier[names.STEP].iloc[-1])
    return float(evals[names.VAL_LOSS].iloc[-1] - earlier[names.VAL_LOSS].iloc[-1]), start, end


def tails(rs: RunSet) -> list[Tail]:
    """Each variant's `Tail`, from its completed runs (a diverged run has no final evaluation)."""
    m = rs.metrics
    if names.VAL_LOSS not in m:
        return []
    done = rs.runs[rs.runs["status"] == "completed"]
    out = []
    for variant in rs.variants:
        found = []
        for run in done.index[done["variant"] == variant]:
            rows = m.loc[m["run"] == run, [names.STEP, names.VAL_LOSS]].copy()
            rows[names.VAL_LOSS] = finite(rows[names.VAL_LOSS])
            tail = _run_tail(rows)
            if tail is not None:
                found.append(tail)
        if not found:
            continue
        e = estimate([t[0] for t in found])
        lo, hi = e.ci(LEVEL)
        interval = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None
        out.append(Tail(variant, e.value, interval, len(found), found[0][1], found[0][2]))
    return out


def budget_steps(rs: RunSet) -> str | None:
    """'200' (every run's train.max_steps), '100–200' where they differ; None where unknown."""
    if "train.max_steps" not in rs.valid:
        return None
    steps = sorted({int(s) for s in finite(rs.valid["train.max_steps"]).dropna()})
    if not steps:
        return None
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"


def fixed_budget(rs: RunSet) -> bool:
    """Whether some variant's validation loss was still falling at the end: the comparison is then one at
    a fixed budget of steps, not at convergence."""
    return any(t.state == FALLING for t in tails(rs))


def convergence_sentence(rs: RunSet) -> str | None:
    """Whether the runs had converged, per variant; None where no run has two evaluations to compare."""
    found = tails(rs)
    if not found:
        return None
    steps = budget_steps(rs) or "?"
    by_state: dict[str, list[Tail]] = {}
    for t in found:
        by_state.setdefault(t.state, []).append(t)
    listed = "; ".join(t.text() for t in found)
    quarter = "over the last quarter of training"
    if FALLING in by_state:
        where = (
            "in every variant"
            if len(by_state[FALLING]) == len(found)
            else "in " + ", ".join(f"`{t.variant}`" for t in by_state[FALLING])
        )
        return (
            f"At a fixed budget of {steps} steps: the validation loss was still falling at the end {where}, so "
            "these runs had not converged and longer training can change the differences below. Its change "
            f"{quarter}: {listed}."
        )
    if set(by_state) == {LEVELLED}:
        return (
            f"After {steps} steps the validation loss had levelled off in every variant (its change {quarter} "
            f"lies within ±{LEVELLED_NATS:g} nats), so the differences below are those near convergence for this "
            f"setup. Its change {quarter}: {listed}."
        )
    band = f"±{LEVELLED_NATS:g} nats"
    said = {
        LEVELLED: "had levelled off (changed by less than the band) in",
        RISING: "was rising at the end in",
        UNDECIDED: "was undecided (its interval reaches both inside and beyond the band) in",
    }
    states = " and ".join(
        f"{said[state]} " + ", ".join(f"`{t.variant}`" for t in of) for state, of in by_state.items()
    )
    return (
        f"After {steps} steps, with {band} over the last quarter of training as the band of a levelled-off "
        f"loss, the validation loss {states}. Its change {quarter}: {listed}."
    )


def budget_if_fixed(rs: RunSet) -> str | None:
    """The budget ('200') where the comparison is one at a fixed budget of steps (`fixed_budget`), else None."""
    return budget_steps(rs) if fixed_budget(rs) else None


def sentences(rs: RunSet) -> list[str]:
    """The report's opening: what the runs share (`conditions_sentence`) and whether they had converged
    (`convergence_sentence`)."""
    return [s for s in (conditions_sentence(rs), convergence_sentence(rs)) if s]
