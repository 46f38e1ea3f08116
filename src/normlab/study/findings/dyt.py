"""Finding 11 — Zhu et al. 2025 (Transformers without Normalization): Dynamic Tanh, γ·tanh(α·x) + β with a
learnable scalar α, in place of every LayerNorm, reaches LayerNorm's loss.

What the paper says (read in the authors' README, jiachenzhu/DyT): "Models with DyT achieves similar or
better performance than their normalized counterparts"; its LLaMA runs (7B–70B, other_tasks/LLaMA) drop β,
set α's initial value per slot and per width (attention 0.8, FFN and final norm 0.2 at 7B; smaller for
wider models), untie the head and multiply the embedding by a learnable scalar initialised to √d.

Measured here: final validation loss of Pre-LN models with LayerNorm and with DyT in every slot (the two
norms of each block and the final one), over seeds — an equality claim, two one-sided tests against
±0.05 nats (about 5 % in perplexity, the margin of the RMSNorm finding). The claim is about where
training ends, so the preset trains 2,000 steps (≈ 5 tokens per parameter; round 3's 300 steps compared
how fast the two converge) and tunes the learning rate: each norm's rate is chosen on seed 0 over 1e-3,
3e-3 and 1e-2 (the calibration), the sweep runs the two that matter on seeds 1–5, and the claim is judged
at LayerNorm's tuned rate (the authors' protocol: "mostly without hyperparameter tuning", the normalised
model's settings with α₀ tuned) — DyT at its own tuned rate, and both at each rate, are reported beside
it. The preset runs the authors' LLaMA recipe (`norm=dyt_llama`, untied, `model.learn_embed_scale`) and
says where it departs; α₀ at this width, far below any the authors ran, is the robustness line.
"Can this happen here?" — an equality claim needs no phenomenon, only two models that learned; but the
verdict is about d_model 64 and 2,000 steps, and says so: the authors' smallest LLaMA is 7B.
"""

from __future__ import annotations

from normlab.analysis.estimate import fmt_estimate
from normlab.analysis.load import RunSet
from normlab.analysis.plots import plot_loss
from normlab.study.findings._compare import compare
from normlab.study.findings._finding import Calibration, CannotEvaluate, Drawn, Extras, Finding, Perturbation
from normlab.study.findings._format import CI_LABEL, diverged_count, fmt_series, per_seed
from normlab.study.findings._learning import baseline_note, learned_count, require_learning
from normlab.study.findings._runs import group_labels, has_key, loss_of, need, values, where
from normlab.study.verdicts import CONFIDENCE, Outcome, equivalence_check

LOSS_MARGIN = 0.05  # nats: |Δ loss| below this is "matches" (≈ 5 % in perplexity)
NORMS = {"ln": "LayerNorm", "dyt": "DyT"}
# the peak learning rate the seed-0 calibration (CALIBRATED_GRID at the preset's horizon) found best for
# each norm; the claim is judged at LayerNorm's — the authors' protocol: the normalised model's
# hyper-parameters — and DyT at its own best is reported beside it
TUNED_LR = {"ln": 1e-2, "dyt": 2e-2}
# the rates the calibration that chose TUNED_LR ran (its arms, below), and the grid the next
# `scripts/reproduce.py dyt_vs_ln --calibrate` runs. Round 4's first calibration ran 1e-3 … 1e-2 and both
# norms were best at its largest rate (issue 37's referee: not an interior optimum); the grid was extended
# upwards, and now each norm's best lies inside it
CALIBRATED_GRID = (1e-3, 3e-3, 1e-2, 2e-2, 3e-2)
# seed 0's final val loss at each of those rates (our runs, 2026-11-27/28; the calibration's arms)
CALIBRATED_LOSS = {"ln": (1.157, 0.813, 0.723, 0.749, 0.763), "dyt": (2.035, 1.184, 0.856, 0.831, 0.834)}
CALIBRATION_GRID = CALIBRATED_GRID
# DyT's α at init (attention / FFN and final norm) for the robustness line, calibrated on seed 0 at the
# preset's horizon and LayerNorm's tuned rate (the second calibration sweep); the authors' 7B values are
# 0.8 / 0.2, and d_model 64 is far below any width they ran
ALPHA_GRID = {"attn": (0.8, 1.6, 3.2), "ffn": (0.4, 0.8, 1.6)}


def at_edge(rate: float, grid: tuple[float, ...]) -> bool:
    """Whether `rate` is the largest or the smallest of the grid it was chosen on (not an interior optimum)."""
    return bool(grid) and (rate >= max(grid) or rate <= min(grid))


def edge_note() -> str | None:
    """The sentence that says the verdict rests on a tuned rate at the calibration grid's edge, if it does."""
    edge = [n for n in NORMS if at_edge(TUNED_LR[n], CALIBRATED_GRID)]
    if not edge:
        return None
    who = " and ".join(NORMS[n] for n in edge)
    grid = ", ".join(f"{r:g}" for r in CALIBRATED_GRID)
    more = sorted(set(CALIBRATION_GRID) - set(CALIBRATED_GRID))
    return (
        f"The tuned rate is the edge of the calibration grid: {who} were best at the "
        f"{'largest' if TUNED_LR[edge[0]] >= max(CALIBRATED_GRID) else 'smallest'} rate tried ({grid}), so "
        "neither optimum is shown to be interior, and this verdict rests on that — the gap may change above it "
        "(on seed 0 DyT − LayerNorm at those rates: "
        + ", ".join(
            f"{d - n:.2f}" for d, n in zip(CALIBRATED_LOSS["dyt"], CALIBRATED_LOSS["ln"], strict=True)
        )
        + " nats). The next calibration "
        f"runs {', '.join(f'{r:g}' for r in more)} as well (`scripts/reproduce.py dyt_vs_ln --calibrate`)."
        if more
        else f"The tuned rate is the edge of the calibration grid ({grid}) for {who}; this verdict rests on that."
    )


STATED_SOURCE = (
    "abstract: “Transformers without normalization can match or exceed the performance of their normalized "
    "counterparts, mostly without hyperparameter tuning”; the LLaMA comparison (7B–70B, the authors' "
    "other_tasks/LLaMA recipe) — the loss where pre-training ends, at the normalised model's "
    "hyper-parameters"
)


def _lrs(rs: RunSet) -> list[float]:
    return [float(v) for v in values(rs, "optim.lr")] if has_key(rs, "optim.lr") else []


def _at(rs: RunSet, norm: str, lr: float | None):
    return loss_of(rs, norm=norm) if lr is None else loss_of(rs, norm=norm, **{"optim__lr": _as_run(rs, lr)})


def _as_run(rs: RunSet, lr: float) -> str:
    """The lr as the runs' config spells it (where compares as text)."""
    for v in values(rs, "optim.lr"):
        if abs(float(v) - lr) <= 1e-12 * max(1.0, lr):
            return str(v)
    return repr(lr)


def tuned(rs: RunSet, norm: str) -> float | None:
    """The rate a norm is judged at: the calibrated one when the sweep ran it, else the sweep's only rate
    (None: the sweep does not vary it)."""
    lrs = _lrs(rs)
    if len(lrs) <= 1:
        return None
    want = TUNED_LR[norm]
    if not any(abs(x - want) <= 1e-12 * max(1.0, want) for x in lrs):
        raise CannotEvaluate(f"the sweep has no optim.lr={want:g}, the rate the calibration chose for {norm}")
    return want


def evaluate(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "norm", list(NORMS))
    lr = tuned(rs, "ln")
    own = tuned(rs, "dyt")
    steps = "/".join(str(v) for v in values(rs, "train.max_steps")) if has_key(rs, "train.max_steps") else "?"
    edge = edge_note()
    tuned_at = "LayerNorm's tuned rate, the edge of the grid tried" if edge else "LayerNorm's tuned rate"
    at = f" at lr {lr:g} ({tuned_at})" if lr is not None else ""
    loss = {n: _at(rs, n, lr) for n in NORMS}
    gap = compare(rs, loss["dyt"], loss["ln"])
    checks = [
        equivalence_check(
            f"DyT's final val loss matches LayerNorm's{at}, after {steps} steps",
            "final val loss of DyT − LayerNorm (paired by seed); equal within "
            f"±{LOSS_MARGIN:g} nats by two one-sided tests",
            gap,
            margin=LOSS_MARGIN,
            unit="nats",
            source=STATED_SOURCE,
        )
    ]
    if lr is not None and own is not None and own != lr:
        best = {"ln": loss["ln"], "dyt": _at(rs, "dyt", own)}
        checks.append(
            equivalence_check(
                f"DyT at its own tuned rate ({own:g}) matches LayerNorm at its ({lr:g}) (not the authors' protocol)",
                "final val loss of DyT − LayerNorm, each at its own calibrated rate (paired by seed); ±"
                f"{LOSS_MARGIN:g} nats by two one-sided tests",
                compare(rs, best["dyt"], best["ln"]),
                margin=LOSS_MARGIN,
                unit="nats",
                counts=False,
                source="ours: a fairer-to-DyT comparison than the paper's protocol, reported",
            )
        )
    table = []
    for n, label in NORMS.items():
        for rate in _lrs(rs) or [None]:
            runs = where(rs, norm=n) if rate is None else where(rs, norm=n, optim__lr=_as_run(rs, rate))
            cell = _at(rs, n, rate)
            row = {"norm": label}
            if rate is not None:
                row["peak lr"] = f"{rate:g}" + (" (tuned)" if rate == TUNED_LR[n] else "")
            row.update(
                {
                    "runs": len(runs),
                    "learned": learned_count(rs, runs),
                    "diverged": diverged_count(runs),
                    "final val loss": fmt_series(cell),
                    "per run": per_seed(cell),
                }
            )
            table.append(row)
    gate = require_learning(
        rs,
        {
            label: (where(rs, norm=n) if lr is None else where(rs, norm=n, optim__lr=_as_run(rs, lr)))
            for n, label in NORMS.items()
        },
    )
    notes = [f"DyT − LayerNorm{at} ({CI_LABEL}): {fmt_estimate(gap, CONFIDENCE)} nats.", *gate.notes]
    if edge and lr is not None:
        notes.insert(0, edge)
    for rate in _lrs(rs) if len(_lrs(rs)) > 1 else []:
        other = compare(rs, _at(rs, "dyt", rate), _at(rs, "ln", rate))
        notes.append(
            f"At lr {rate:g}, DyT − LayerNorm: {fmt_estimate(other, CONFIDENCE)} nats (not counted)."
        )
    dyt = where(rs, norm="dyt")
    slots = {}
    for slot in ("attn", "ffn", "final"):
        col = f"norm.alpha_{slot}"
        vals = dyt[col].dropna().tolist() if col in dyt.columns else []
        if not vals and "norm.alpha_init" in dyt.columns:
            vals = dyt["norm.alpha_init"].dropna().tolist()
        slots[slot] = sorted({float(a) for a in vals if isinstance(a, int | float)})
    if any(slots.values()):
        notes.append(
            "DyT's α at init — attention / FFN / final norm: "
            + " / ".join(", ".join(f"{a:g}" for a in v) or "?" for v in slots.values())
            + "."
        )
    if (base := baseline_note(rs)) is not None:
        notes.append(base)
    return Outcome.of(checks, table=table, notes=notes, setup_failures=gate.failures)


def draw(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["norm"])
    return [("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g))]


FINDING = Finding(
    11,
    "dyt_vs_ln",
    "DyT vs LayerNorm: loss",
    "Dynamic Tanh in place of every LayerNorm of a Pre-LN model, with the authors' LLaMA recipe (no β, α₀ per "
    "slot, an untied head, a learnable √d embedding scale), ends training at the same loss (within ±0.05 "
    "nats) at the learning rate tuned for LayerNorm.",
    "Zhu et al. 2025, *Transformers without Normalization* (CVPR), as the authors' README puts it: models "
    'with DyT achieve "similar or better performance than their normalized counterparts".',
    False,
    evaluate,
    draw,
    perturbation=Perturbation(
        "α₀ 1.6 / 0.8 / 0.8 (attention / FFN / final: calibrated at this width, horizon and rate)",
        ("norm=dyt_llama", "norm.alpha_attn=1.6", "norm.alpha_ffn=0.8", "norm.alpha_final=0.8"),
        "the authors set α₀ per slot and per width, larger for narrower models (their README: 0.8 / 0.2 at "
        "7B, 0.2 / 0.05 at 70B), and d_model 64 is far below any width they ran: α₀ is the setting most "
        "likely to close the gap. The arm is the best of the second seed-0 calibration (2,000 steps, lr "
        "1e-2, attention α₀ 0.8 / 1.6 / 3.2 × FFN and final α₀ 0.4 / 0.8 / 1.6), inside its grid; the "
        "LayerNorm runs are the preset's own.",
        reuse=(("norm", "ln"),),
    ),
    calibration=Calibration(
        seeds=(0,),
        overrides=(
            "norm=ln,dyt_llama",
            "optim.lr=" + ",".join(f"{r:g}" for r in CALIBRATION_GRID),
            "seed=0",
        ),
        then=(
            (
                "norm=dyt_llama",
                f"optim.lr={TUNED_LR['ln']:g}",
                "norm.alpha_attn=" + ",".join(f"{a:g}" for a in ALPHA_GRID["attn"]),
                "norm.alpha_ffn=" + ",".join(f"{a:g}" for a in ALPHA_GRID["ffn"]),
                "norm.alpha_final=${norm.alpha_ffn}",
                "seed=0",
            ),
        ),
        arms="seed 0, the preset's recipe and horizon (2,000 steps) otherwise (our runs, 2026-11-27/28). "
        "First, the peak lr at the authors' 7B α₀ (0.8 / 0.2): final val loss at 1e-3 / 3e-3 / 1e-2 / 2e-2 / "
        "3e-2 — LayerNorm 1.157 / 0.813 / 0.723 / 0.749 / 0.763, DyT 2.035 / 1.184 / 0.856 / 0.831 / 0.834. "
        "Then DyT's α₀ at lr 1e-2, attention × FFN-and-final: 0.8 × 0.4 / 0.8 / 1.6 — 0.824 / 0.824 / 0.841; "
        "1.6 × — 0.827 / 0.810 / 0.822; 3.2 × — 0.847 / 0.842 / 0.862.",
        chosen=f"each norm's rate of lowest loss: LayerNorm {TUNED_LR['ln']:g}, DyT {TUNED_LR['dyt']:g} (TUNED_LR), each "
        "inside the grid. The sweep runs 1e-2 and 2e-2 on seeds 1–5 with the authors' 7B α₀, and the claim is "
        "judged at LayerNorm's 1e-2; DyT at 2e-2 is reported beside it. α₀ 1.6 / 0.8 / 0.8 (the lowest loss, "
        "inside its grid) is the robustness line's arm.",
    ),
    short="DyT in every norm slot reaches LayerNorm's loss (±0.05 nats)",
    paper_scale="LLaMA 7B–70B (the authors' LLaMA runs), and vision and speech models elsewhere in the paper.",
    can_happen="Departures from the authors' recipe besides the model (declared): the cosine schedule decays to min_lr 3e-4 (0.03× the 1e-2 peak), this project's floor rather than the one the authors' training script sets; the LayerNorm baseline gets the same learnable √d embedding scale as DyT, so the two models differ in their norms only. An equality claim needs no phenomenon, only two models that learned (checked) and a horizon that reaches the end of training, not its start: 2,000 steps with the schedule decayed to its floor (≈ 5 tokens per parameter; round 3's 300 steps tested early convergence). Its verdict is about d_model 64 at that horizon, far below the authors' smallest LLaMA (7B, 200B tokens), and says no more than that.",
    stated="“By incorporating DyT, Transformers without normalization can match or exceed the performance of "
    "their normalized counterparts, mostly without hyperparameter tuning” (abstract, arXiv 2503.10622); the "
    "authors' README: models with DyT achieve “similar or better performance than their normalized "
    "counterparts”.",
)
