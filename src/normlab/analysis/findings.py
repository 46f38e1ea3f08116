"""The published findings that `scripts/reproduce.py` re-runs: per finding the claim and its source, the
preset that tests it (configs/experiment/NAME.yaml), how its numbers are computed from the loaded runs,
its checks and figures. Verdict rules are in `normlab.analysis.verdicts`.

    from normlab.analysis import load_runs
    from normlab.analysis.findings import FINDINGS, evaluate
    rs = load_runs("outputs/reproduce/…/sweeps/xiong_warmup")
    outcome = evaluate("xiong_warmup", rs)          # Outcome: verdict, checks, table, notes
    figures = FINDINGS["xiong_warmup"].draw(rs, {})  # [(key, caption, matplotlib Figure)]

Every check is signed so that a positive estimate is the direction the paper claims; its noise is the
standard error over seeds. Losses are final validation losses; a run that diverged counts as making no
progress (its loss is its step-0 validation loss); runs neither completed nor diverged are left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from normlab.analysis.load import RunSet, load_runs
from normlab.analysis.plots import (
    NoData,
    ReportFigure,
    plot_act_rms,
    plot_grad_heatmap,
    plot_grad_norm,
    plot_grad_profile_init,
    plot_grid,
    plot_loss,
    plot_model_update,
)
from normlab.analysis.stats import finite, fmt_mean_std, layer_columns
from normlab.analysis.verdicts import (
    Check,
    Estimate,
    Outcome,
    check,
    combine,
    difference,
    estimate,
    match_check,
)
from normlab.metrics import names

PROFILE_FILE = "profile_norm.json"  # written next to the rmsnorm_speed sweep by scripts/reproduce.py
LOSS_FLOOR = 0.01  # nats: the smallest seed noise assumed for a loss difference
LOG_FLOOR = 0.02  # the smallest noise assumed for a log-ratio (2 %)

Extras = dict[str, Any]
Drawn = list[tuple[str, str, Figure]]  # (file key, caption, figure)


class CannotEvaluate(ValueError):
    """The runs do not hold what a finding needs (a variant or a metric is missing)."""


# ------------------------------------------------------------------------------------------- helpers


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


def values(rs: RunSet, name: str) -> list[Any]:
    """The distinct values of a config key among the runs that trained, numbers sorted."""
    col = rs.valid[key(rs, name)]
    uniq = list(dict.fromkeys(col.tolist()))
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in uniq):
        return sorted(uniq)
    return uniq


def where(rs: RunSet, **conds: Any) -> pd.DataFrame:
    """Runs that trained with the given config values (short key names allowed: placement, depth, lr)."""
    runs = rs.valid
    mask = pd.Series(True, index=runs.index)
    for name, value in conds.items():
        col = runs[key(rs, name.replace("__", "."))]
        mask &= col.astype(str) == str(value)
    return runs[mask]


def need(rs: RunSet, name: str, wanted: Sequence[Any]) -> None:
    have = {str(v) for v in values(rs, name)}
    missing = [str(w) for w in wanted if str(w) not in have]
    if missing:
        raise CannotEvaluate(
            f"the runs have no {name}={','.join(missing)} (found {', '.join(sorted(have)) or 'none'})"
        )


def step0_val(rs: RunSet, run: str) -> float:
    m = rs.metrics
    if names.VAL_LOSS not in m.columns:
        return math.nan
    v = finite(m.loc[(m["run"] == run) & (m[names.STEP] == 0), names.VAL_LOSS]).dropna()
    return float(v.iloc[0]) if len(v) else math.nan


def end_loss(rs: RunSet, runs: pd.DataFrame) -> pd.Series:
    """Final validation loss per run; a diverged run counts as no progress (its step-0 val loss);
    other statuses (interrupted, crashed) are NaN, i.e. left out."""
    out = {}
    for run, r in runs.iterrows():
        if r["status"] == "completed" and r["final_val_loss"] is not None:
            out[run] = float(r["final_val_loss"])
        elif r["status"] == "diverged":
            out[run] = step0_val(rs, run)
        else:
            out[run] = math.nan
    return pd.Series(out, dtype=float)


def loss_of(rs: RunSet, **conds: Any) -> pd.Series:
    return end_loss(rs, where(rs, **conds))


def run_metric(rs: RunSet, run: str, metric: str) -> pd.Series:
    """One run's finite values of a metric, indexed by step."""
    m = rs.metrics
    if metric not in m.columns:
        return pd.Series(dtype=float)
    sub = m.loc[m["run"] == run, [names.STEP, metric]]
    s = pd.Series(finite(sub[metric]).to_numpy(), index=sub[names.STEP].to_numpy())
    return s.dropna()


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None or not isinstance(v, int | float) or not math.isfinite(v):
        return "–"
    return f"{v:.{digits}f}"


def fmt_series(s: pd.Series | Sequence[float], digits: int = 3) -> str:
    v = finite(pd.Series(list(s), dtype=float)).dropna()
    if v.empty:
        return "–"
    return fmt_mean_std(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else None, digits)


def per_seed(s: pd.Series | Sequence[float], digits: int = 2) -> str:
    """The individual values, in seed order: '3.53, 3.50, 5.75'."""
    return ", ".join(fmt(float(v), digits) for v in list(s)) or "–"


def fmt_est(e: Estimate, digits: int = 3) -> str:
    if not math.isfinite(e.value):
        return "–"
    se = f" ± {e.se:.{digits}f}" if math.isfinite(e.se) else ""
    return f"{e.value:+.{digits}f}{se}"


def diverged_count(runs: pd.DataFrame) -> str:
    return f"{int((runs['status'] == 'diverged').sum())}/{len(runs)}"


def group_labels(rs: RunSet, keys: Sequence[str]) -> RunSet:
    """Regroup by those of `keys` that vary (short names), falling back to the default grouping."""
    present = [k for k in keys if _varies(rs, k)]
    return rs.regroup(present or None)


def _varies(rs: RunSet, name: str) -> bool:
    try:
        return rs.valid[key(rs, name)].astype(str).nunique() > 1
    except Exception:
        return False


# ------------------------------------------------------------------------------- finding 1: Xiong init


def _grad_profiles(rs: RunSet) -> pd.DataFrame:
    """One row per run at step 0: init, placement, depth, seed and the per-block gradient norms."""
    m0 = rs.metrics[rs.metrics[names.STEP] == 0]
    init_key = key(rs, "init") if "model.init" in rs.runs.columns else None
    rows = []
    for run, r in rs.valid.iterrows():
        row = m0[m0["run"] == run]
        depth = int(r["depth"])
        cols = [names.grad_norm_layer(i) for i in range(depth)]
        if row.empty or any(c not in row.columns for c in cols):
            continue
        g = finite(row.iloc[0][cols].astype(float)).to_numpy()
        if not np.all(np.isfinite(g)) or np.any(g <= 0):
            continue
        rows.append(
            {
                "run": run,
                "init": str(r[init_key]) if init_key else "gpt2",
                "placement": r["placement"],
                "depth": depth,
                "seed": r.get("seed"),
                "g": g,
            }
        )
    if not rows:
        raise CannotEvaluate("no per-layer gradient norms (grad_norm/layer_i) at step 0")
    return pd.DataFrame(rows)


def _depth_slopes(p: pd.DataFrame) -> pd.DataFrame:
    """Per (init, placement, seed): slope b of log ‖g_last‖ against log depth."""
    out = []
    for (init, placement, seed), grp in p.groupby(["init", "placement", "seed"], sort=False):
        if grp["depth"].nunique() < 2:
            continue
        x = np.log(grp["depth"].to_numpy(dtype=float))
        y = np.log([g[-1] for g in grp["g"]])
        out.append({"init": init, "placement": placement, "seed": seed, "b": float(np.polyfit(x, y, 1)[0])})
    return pd.DataFrame(out, columns=["init", "placement", "seed", "b"])


def _concentration(g: np.ndarray) -> float:
    """log(mean gradient norm of the top third of blocks / bottom third)."""
    k = max(1, len(g) // 3)
    return float(np.log(np.mean(g[-k:]) / np.mean(g[:k])))


def evaluate_xiong_grad_profile(rs: RunSet, extras: Extras) -> Outcome:
    p = _grad_profiles(rs)
    need(rs, "placement", ["pre", "post"])
    slopes = _depth_slopes(p)
    if slopes.empty:
        raise CannotEvaluate("the runs cover a single depth; the depth trend needs at least two")
    inits = list(dict.fromkeys(p["init"]))
    decisive = "xavier" if "xavier" in inits else None  # the paper's setting decides the verdict
    checks: list[Check] = []
    table: list[dict[str, object]] = []
    notes: list[str] = []
    for init in inits:
        counts = decisive is None or init == decisive
        s = slopes[slopes["init"] == init]
        b = {pl: estimate(s.loc[s["placement"] == pl, "b"]) for pl in ("pre", "post")}
        lmax = int(p.loc[p["init"] == init, "depth"].max())
        lmin = int(p.loc[p["init"] == init, "depth"].min())
        conc = {}
        for pl in ("pre", "post"):
            deep = p[(p["init"] == init) & (p["placement"] == pl) & (p["depth"] == lmax)]
            conc[pl] = estimate(_concentration(g) for g in deep["g"])
            last = {
                L: [g[-1] for g in p[(p["init"] == init) & (p["placement"] == pl) & (p["depth"] == L)]["g"]]
                for L in (lmin, lmax)
            }
            table.append(
                {
                    "init": init,
                    "placement": pl,
                    "depth exponent b (‖g_last‖ ∝ L^b)": fmt_est(b[pl], 2),
                    f"‖g_last‖ at L={lmin}": fmt_series(last[lmin], 3),
                    f"‖g_last‖ at L={lmax}": fmt_series(last[lmax], 3),
                    f"top/bottom-third log ratio at L={lmax}": fmt_est(conc[pl], 2),
                }
            )
        tag = f"[{init} init] "
        part = [
            check(
                tag + "Pre-LN's last-layer gradient shrinks with depth about as 1/√L",
                "−¼ − b_pre, where b_pre is the slope of log ‖g_last‖ (gradient norm of the last block at "
                "step 0) against log L, fitted per seed over the depths run; positive when b_pre < −¼, i.e. "
                "closer to −½ (1/√L) than to 0",
                b["pre"].scale(-1) - Estimate(0.25, 0.0, b["pre"].n),
                LOG_FLOOR,
                counts=counts,
            ),
            check(
                tag + "Post-LN's last-layer gradient does not shrink with depth",
                "b_post + ¼; positive when b_post > −¼, i.e. closer to 0 than to −½",
                b["post"] + Estimate(0.25, 0.0, b["post"].n),
                LOG_FLOOR,
                counts=counts,
            ),
            check(
                tag + f"Post-LN's gradient is concentrated near the output (L={lmax})",
                "log(mean gradient norm of the top third of blocks / of the bottom third) for Post-LN at "
                "the deepest depth; positive = larger near the output",
                conc["post"],
                LOG_FLOOR,
                counts=counts,
            ),
        ]
        checks += part
        if not counts:
            notes.append(
                f"Under {init} init (reported, not part of the verdict, which follows the paper's Xavier "
                f"setting): **{combine([replace(c, counts=True) for c in part])}** "
                f"({sum(c.verdict == 'reproduced' for c in part)}/{len(part)} checks reproduced)."
            )
    return Outcome.of(checks, table=table, notes=notes)


def draw_xiong_grad_profile(rs: RunSet, extras: Extras) -> Drawn:
    p = _grad_profiles(rs)
    grouping = ["init", "placement"]
    lmax = int(p["depth"].max())
    deep = subset(rs, p.loc[p["depth"] == lmax, "run"], None)
    deep = group_labels(deep, grouping)
    fig1 = plot_grad_profile_init(deep)
    fig1.axes[0].set_title(
        f"Gradient norm per block at initialisation, depth {lmax} (step 0, before any update)"
    )
    # gradient of the last block vs depth, log-log, one line per (init, placement)
    fig2 = ReportFigure(figsize=(8.5, 4.6), layout="constrained")
    ax = fig2.subplots()
    ax.grid(True, alpha=0.3, linewidth=0.6)
    colors = deep.colors
    for (init, placement), grp in p.groupby(["init", "placement"], sort=False):
        label = (
            ", ".join([f"init={init}"] * _varies(rs, "init") + [placement] * _varies(rs, "placement"))
            or f"{init}, {placement}"
        )
        last = grp.assign(last=[g[-1] for g in grp["g"]]).groupby("depth")["last"]
        mean, std = last.mean(), last.std(ddof=1)
        color = colors.get(label, None)
        marker = deep.markers.get(label, "o")
        ax.errorbar(
            mean.index,
            mean.to_numpy(),
            yerr=std.to_numpy(),
            marker=marker,
            mfc="white",
            ms=4,
            lw=1.6,
            capsize=2,
            color=color,
            label=label,
        )
        if placement == "pre":
            ref = mean.iloc[0] * np.sqrt(mean.index[0] / mean.index.to_numpy(dtype=float))
            ax.plot(mean.index, ref, ls=":", color=color, lw=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    depths = sorted(p["depth"].unique())
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.minorticks_off()
    ax.set_xlabel("depth L (blocks), log scale")
    ax.set_ylabel("gradient norm of the last block at step 0 (log)")
    ax.set_title(
        "Last-block gradient at step 0 vs depth (mean ± std over seeds; dotted: ∝ 1/√L)",
        fontsize=10,
    )
    fig2.legend(loc="outside right upper", frameon=False, fontsize=9)
    return [
        ("layers", f"Per-block gradient norm at step 0, depth {lmax}, mean over seeds.", fig1),
        ("depth", "Gradient norm of the last block at step 0 against depth (log-log).", fig2),
    ]


# ----------------------------------------------------------------------------- finding 2: Xiong warmup


def evaluate_xiong_warmup(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", ["pre", "post"])
    warmups = values(rs, "warmup_steps")
    if len(warmups) < 2:
        raise CannotEvaluate("the runs use a single warmup length; the finding needs with and without")
    w0, w1 = warmups[0], warmups[-1]
    loss = {(pl, w): loss_of(rs, placement=pl, warmup_steps=w) for pl in ("pre", "post") for w in (w0, w1)}
    gap0 = difference(loss[("post", w0)], loss[("pre", w0)])
    gap1 = difference(loss[("post", w1)], loss[("pre", w1)])
    checks = [
        check(
            f"Without warmup (warmup_steps={w0}), Post-LN ends with a higher loss than Pre-LN",
            "Δ₀ = final val loss of Post-LN − Pre-LN, both without warmup (mean over seeds, Welch SE)",
            gap0,
            LOSS_FLOOR,
            unit="nats",
        ),
        check(
            f"Warmup ({w1} steps) closes most (more than half) of that gap",
            "Δ₀ − 2·Δ_w, where Δ_w is the same gap with warmup; positive when Δ_w < Δ₀/2",
            gap0 - gap1.scale(2.0),
            LOSS_FLOOR,
            unit="nats",
        ),
    ]
    table = []
    for pl in ("pre", "post"):
        for w in (w0, w1):
            runs = where(rs, placement=pl, warmup_steps=w)
            table.append(
                {
                    "placement": pl,
                    "warmup_steps": w,
                    "runs": len(runs),
                    "diverged": diverged_count(runs),
                    "final val loss": fmt_series(loss[(pl, w)]),
                    "per run": per_seed(loss[(pl, w)]),
                }
            )
    closed = 1 - gap1.value / gap0.value if gap0.value else math.nan
    notes = [
        f"Gap Post-LN − Pre-LN: Δ₀ = {fmt_est(gap0)} nats without warmup, Δ_w = {fmt_est(gap1)} nats with "
        f"{w1} warmup steps; warmup closes {100 * closed:.0f} % of the gap."
        if math.isfinite(closed)
        else "The gap without warmup is zero: nothing for warmup to close."
    ]
    pre0 = where(rs, placement="pre", warmup_steps=w0)
    pre_fine = (pre0["status"] == "diverged").sum() == 0
    preconditions = (
        []
        if pre_fine
        else [
            f"Pre-LN diverged without warmup at this learning rate ({diverged_count(pre0)} runs): the claim "
            "needs a learning rate where Pre-LN is fine."
        ]
    )
    pre_cost = difference(loss[("pre", w0)], loss[("pre", w1)])
    notes.append(
        f"Pre-LN without warmup vs with: {fmt_est(pre_cost)} nats (positive: warmup helps Pre-LN too)."
    )
    return Outcome.of(checks, table=table, notes=notes, preconditions=preconditions)


def draw_xiong_warmup(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["placement", "warmup_steps"])
    return [
        ("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g)),
        ("grid", "Final validation loss over placement × warmup.", plot_grid(g, "placement", "warmup_steps")),
    ]


# -------------------------------------------------------------------------------- finding 3: DeepNet


def _early_fraction(rs: RunSet, run: str, max_steps: int) -> tuple[float, float, float, int]:
    mu = run_metric(rs, run, names.MODEL_UPDATE)
    mu = mu[mu.index > 0]
    if mu.empty:
        return math.nan, math.nan, math.nan, -1
    early_steps = mu.index[mu.index >= 0.1 * max_steps]
    t_e = int(early_steps[0]) if len(early_steps) else int(mu.index[0])
    end = float(mu.iloc[-1])
    return float(mu[t_e]) / end if end > 0 else math.nan, float(mu[t_e]), end, t_e


def evaluate_deepnet_model_update(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "norm", ["ln", "deepnorm"])
    if names.MODEL_UPDATE not in rs.metrics.columns:
        raise CannotEvaluate(f"no '{names.MODEL_UPDATE}' metric (metrics.model_update)")
    loss = {n: loss_of(rs, norm=n, placement="post") for n in ("ln", "deepnorm")}
    frac: dict[str, list[float]] = {}
    table = []
    t_e_seen = set()
    for n in ("ln", "deepnorm"):
        runs = where(rs, norm=n, placement="post")
        rows = [_early_fraction(rs, run, int(r["train.max_steps"])) for run, r in runs.iterrows()]
        frac[n] = [r[0] for r in rows]
        t_e_seen |= {r[3] for r in rows}
        table.append(
            {
                "norm (post placement)": n,
                "runs": len(runs),
                "diverged": diverged_count(runs),
                "final val loss": fmt_series(loss[n]),
                "per run": per_seed(loss[n]),
                "model update at t_e": fmt_series([r[1] for r in rows], 2),
                "model update at the end": fmt_series([r[2] for r in rows], 2),
                "fraction reached by t_e": fmt_series(frac[n], 2),
            }
        )
    t_e = ", ".join(str(t) for t in sorted(t_e_seen))
    checks = [
        check(
            "Post-LN's loss plateaus above DeepNorm's",
            "final val loss of Post-LN − DeepNorm (mean over seeds, Welch SE)",
            difference(loss["ln"], loss["deepnorm"]),
            LOSS_FLOOR,
            unit="nats",
        ),
        check(
            "Post-LN's model update jumps early then stalls, DeepNorm's grows steadily",
            f"fraction of the final model update ‖F(x,θ_t) − F(x,θ_0)‖ already reached at t_e = step {t_e} "
            "(the first measurement after 10 % of training): Post-LN − DeepNorm",
            difference(frac["ln"], frac["deepnorm"]),
            LOG_FLOOR,
        ),
    ]
    return Outcome.of(checks, table=table)


def draw_deepnet_model_update(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["norm"])
    return [
        (
            "model_update",
            "DeepNet's model update on a fixed probe batch, mean ± std over seeds (both variants use post "
            "placement: 'ln' is Post-LN, 'deepnorm' is DeepNorm).",
            plot_model_update(g),
        ),
        ("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g)),
    ]


# ------------------------------------------------------------------------------- finding 4: Peri-LN


def _act_growth(rs: RunSet, run: str) -> dict[str, float]:
    cols = layer_columns(rs.metrics.columns, names.act_rms_layer)
    m = rs.metrics[rs.metrics["run"] == run]
    if not cols or m.empty:
        return {}
    sub = m[[names.STEP, *cols.values()]].copy()
    sub[list(cols.values())] = sub[list(cols.values())].apply(finite)
    sub = sub.dropna(subset=list(cols.values()), how="any").sort_values(names.STEP)
    if len(sub) < 2 or int(sub[names.STEP].iloc[0]) != 0:
        return {}
    r0 = sub.iloc[0][list(cols.values())].to_numpy(dtype=float)
    r1 = sub.iloc[-1][list(cols.values())].to_numpy(dtype=float)
    return {
        "layer_end": float(np.log(r1[-1] / r1[0])),
        "layer_init": float(np.log(r0[-1] / r0[0])),
        "time": float(np.mean(np.log(r1 / r0))),
        "first_end": float(r1[0]),
        "last_end": float(r1[-1]),
        "last_init": float(r0[-1]),
        "end_step": int(sub[names.STEP].iloc[-1]),
    }


def evaluate_periln_act_growth(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", ["pre", "double"])
    growth: dict[str, pd.DataFrame] = {}
    for pl in ("pre", "double"):
        rows = [_act_growth(rs, run) for run in where(rs, placement=pl).index]
        growth[pl] = pd.DataFrame([r for r in rows if r])
        if growth[pl].empty:
            raise CannotEvaluate(f"no residual-stream RMS (act_rms/layer_i) at step 0 and later for {pl}")
    end_step = int(growth["pre"]["end_step"].max())
    g = {pl: growth[pl] for pl in growth}
    checks = [
        check(
            "Under Pre-LN the residual stream's RMS grows with layer index",
            f"log(RMS after the last block / after the first block) at step {end_step}, Pre-LN",
            estimate(g["pre"]["layer_end"]),
            LOG_FLOOR,
        ),
        check(
            "Under Pre-LN it grows over training",
            f"mean over blocks of log(RMS at step {end_step} / RMS at step 0), Pre-LN",
            estimate(g["pre"]["time"]),
            LOG_FLOOR,
        ),
        check(
            "Growth with layer index is smaller under double placement",
            "the layer log-ratio above, Pre-LN − double (Welch SE)",
            difference(g["pre"]["layer_end"], g["double"]["layer_end"]),
            LOG_FLOOR,
        ),
        check(
            "Growth over training is smaller under double placement",
            "the training log-ratio above, Pre-LN − double (Welch SE)",
            difference(g["pre"]["time"], g["double"]["time"]),
            LOG_FLOOR,
        ),
    ]
    table = [
        {
            "placement": pl,
            "runs": len(g[pl]),
            "RMS after last block, step 0": fmt_series(g[pl]["last_init"], 2),
            f"RMS after last block, step {end_step}": fmt_series(g[pl]["last_end"], 2),
            "log(last/first block), step 0": fmt_series(g[pl]["layer_init"], 2),
            f"log(last/first block), step {end_step}": fmt_series(g[pl]["layer_end"], 2),
            "mean log growth over training": fmt_series(g[pl]["time"], 2),
        }
        for pl in ("pre", "double")
    ]
    return Outcome.of(checks, table=table)


def draw_periln_act_growth(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["placement"])
    return [("act_rms", "Residual-stream RMS after each block, at step 0 and at the end.", plot_act_rms(g))]


# ------------------------------------------------------------------------------ finding 5: RMSNorm


def evaluate_rmsnorm_speed(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "norm", ["ln", "rms"])
    loss = {n: loss_of(rs, norm=n) for n in ("ln", "rms")}
    tps = {n: where(rs, norm=n)["tokens_per_s"].astype(float) for n in ("ln", "rms")}
    checks = [
        match_check(
            "RMSNorm's final val loss matches LayerNorm's",
            "final val loss of RMSNorm − LayerNorm (mean over seeds, Welch SE); positive = RMSNorm worse",
            difference(loss["rms"], loss["ln"]),
            LOSS_FLOOR,
            margin=0.1,
            unit="nats",
        )
    ]
    profile = extras.get("profile")
    speed = Estimate(math.nan, math.nan, 0)
    statistic = (
        "log(t_LN / t_RMS) of the step time, single thread, blocks of steps alternating ABBA; mean ± SE over "
        "block pairs; positive = RMSNorm faster"
    )
    if profile and profile.get("norms") == ["ln", "rms"]:
        t = profile["timing"]
        speed = Estimate(float(t["log_ratio_mean"]), float(t["log_ratio_se"]), len(t["log_ratio"]))
    checks.append(check("RMSNorm's training step is faster than LayerNorm's", statistic, speed, 0.005))
    checks.append(
        check(
            "(sweep throughput, informational) RMSNorm processes more tokens/s",
            "log(tokens/s) of RMSNorm − LayerNorm over the sweep's runs (parallel jobs on shared cores: noisy)",
            difference(np.log(tps["rms"]), np.log(tps["ln"])),
            LOG_FLOOR,
            counts=False,
        )
    )
    table = []
    for n in ("ln", "rms"):
        runs = where(rs, norm=n)
        row: dict[str, object] = {
            "norm": n,
            "runs": len(runs),
            "final val loss": fmt_series(loss[n]),
            "per run": per_seed(loss[n]),
            "sweep tokens/s": fmt_series(tps[n], 0),
        }
        if profile and n in profile.get("profile", {}):
            p, steps = profile["profile"][n], profile["timing"]["step_s"][n]
            row["step time, ABBA (ms)"] = fmt_series([1e3 * s for s in steps], 1)
            row["profiled step (ms)"] = fmt(p["step_ms"], 1)
            row["norm fwd + bwd (ms)"] = f"{p['norm_forward_ms']:.2f} + {p['norm_backward_ms']:.2f}"
            row["norm share of step time"] = f"{100 * p['norm_share']:.1f} %"
            row["norm share of FLOPs"] = f"{100 * profile['flops'][n]['norm_flop_share']:.2f} %"
        table.append(row)
    notes = []
    if profile:
        m = profile["model"]
        notes.append(
            f"Profile: d_model {m['d_model']}, depth {m['depth']}, {m['placement']} placement, batch "
            f"{m['batch_size']}×{m['seq_len']} tokens, {profile['threads']} thread, torch {profile['torch']}; "
            "norm share = (forward + backward of every norm module) / whole training step, from torch.profiler "
            "(its per-op overhead inflates many-small-op norms: an upper bound). The background notes cite "
            "~0.2 % of FLOPs but ~25 % of runtime for BERT on a GPU (Ivanov et al. 2021)."
        )
        notes.append(
            "normlab's RMSNorm is a few unfused elementwise ops in Python (float32 statistics), LayerNorm is "
            "PyTorch's fused native kernel: the speed check measures these implementations, not the ideal "
            "operation counts."
        )
    else:
        notes.append("No profile_norm.json next to the sweep: the speed check could not be measured.")
    return Outcome.of(checks, table=table, notes=notes)


def draw_rmsnorm_speed(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["norm"])
    out: Drawn = [("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g))]
    profile = extras.get("profile")
    if profile:
        fig = ReportFigure(figsize=(9.5, 3.8), layout="constrained")
        ax_t, ax_s = fig.subplots(1, 2)
        norms = profile["norms"]
        colors = [g.colors.get(n, f"C{i}") for i, n in enumerate(norms)]
        steps = profile["timing"]["step_s"]
        means = [1e3 * np.mean(steps[n]) for n in norms]
        stds = [1e3 * np.std(steps[n], ddof=1) if len(steps[n]) > 1 else 0 for n in norms]
        ax_t.bar(norms, means, yerr=stds, color=colors, capsize=4)
        ax_t.set_ylabel("ms per training step (1 thread)")
        ax_t.set_title("Step time, ABBA-interleaved (mean ± std over blocks)", fontsize=10)
        fwd = [profile["profile"][n]["norm_forward_ms"] for n in norms]
        bwd = [profile["profile"][n]["norm_backward_ms"] for n in norms]
        total = [profile["profile"][n]["step_ms"] for n in norms]
        share_f = [100 * f / t for f, t in zip(fwd, total, strict=True)]
        share_b = [100 * b / t for b, t in zip(bwd, total, strict=True)]
        ax_s.bar(norms, share_f, color=colors, label="forward")
        ax_s.bar(norms, share_b, bottom=share_f, color=colors, alpha=0.45, hatch="//", label="backward")
        for i, _n in enumerate(norms):
            ax_s.text(
                i, share_f[i] + share_b[i], f"{share_f[i] + share_b[i]:.1f} %", ha="center", va="bottom"
            )
        ax_s.set_ylim(0, 1.18 * max(f + b for f, b in zip(share_f, share_b, strict=True)))
        ax_s.set_ylabel("% of the training step in norm modules")
        ax_s.set_title("torch.profiler: time in normalization", fontsize=10)
        ax_s.legend(frameon=False, fontsize=9)
        for ax in (ax_t, ax_s):
            ax.grid(True, axis="y", alpha=0.3)
        out.append(("profile", "Step time and the share of it spent in normalization (single thread).", fig))
    return out


# ---------------------------------------------------------------------------- finding 6: BatchNorm


def evaluate_batchnorm_batch_size(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "norm", ["bn", "ln"])
    batches = values(rs, "batch_size")
    if len(batches) < 2:
        raise CannotEvaluate("the runs use a single batch size; the finding compares several")
    gap, train_gap, table = {}, {}, []
    for b in batches:
        lb = {n: loss_of(rs, norm=n, batch_size=b) for n in ("bn", "ln")}
        tr = {n: where(rs, norm=n, batch_size=b)["final_train_loss"].astype(float) for n in ("bn", "ln")}
        gap[b] = difference(lb["bn"], lb["ln"])
        train_gap[b] = difference(tr["bn"], tr["ln"])
        for n in ("bn", "ln"):
            runs = where(rs, norm=n, batch_size=b)
            table.append(
                {
                    "batch size": b,
                    "norm": n,
                    "runs": len(runs),
                    "diverged": diverged_count(runs),
                    "final val loss": fmt_series(lb[n]),
                    "per run": per_seed(lb[n]),
                    "final train loss": fmt_series(tr[n]),
                }
            )
    bmin, bmax = batches[0], batches[-1]
    checks = [
        check(
            f"BatchNorm ends worse than LayerNorm at batch size {bmin}",
            f"final val loss BN − LN at batch {bmin} (Welch SE)",
            gap[bmin],
            LOSS_FLOOR,
            unit="nats",
        ),
        check(
            f"BatchNorm ends worse than LayerNorm at batch size {bmax}",
            f"final val loss BN − LN at batch {bmax} (Welch SE)",
            gap[bmax],
            LOSS_FLOOR,
            unit="nats",
        ),
        check(
            f"BatchNorm's disadvantage is larger at batch size {bmin} than at {bmax}",
            f"(BN − LN at batch {bmin}) − (BN − LN at batch {bmax})",
            gap[bmin] - gap[bmax],
            LOSS_FLOOR,
            unit="nats",
        ),
    ]
    notes = [
        "BN − LN gap in final val loss (eval mode: BN uses running statistics) by batch size: "
        + ", ".join(f"{b}: {fmt_est(gap[b])}" for b in batches)
        + "; in final training loss (batch statistics): "
        + ", ".join(f"{b}: {fmt_est(train_gap[b])}" for b in batches)
        + " nats.",
        "Steps are fixed, so larger batches see more tokens; each check compares BN with LN at equal batch.",
    ]
    return Outcome.of(checks, table=table, notes=notes)


def draw_batchnorm_batch_size(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["norm", "batch_size"])
    return [
        (
            "grid",
            "Final validation loss over batch size × norm (mean ± std over seeds).",
            plot_grid(g, "batch_size", "norm"),
        ),
        ("loss", "Training and validation loss, mean ± std over seeds.", plot_loss(g)),
    ]


# ----------------------------------------------------------------------------- finding 7: Wortsman


def _lr_table(rs: RunSet) -> tuple[pd.DataFrame, float]:
    """One row per run: placement, depth, warmup, lr, seed, loss (diverged → loss₀); and loss₀."""
    runs = rs.valid
    loss = end_loss(rs, runs)
    l0 = float(np.nanmean([step0_val(rs, r) for r in runs.index]))
    df = pd.DataFrame(
        {
            "placement": runs["placement"],
            "depth": runs["depth"].astype(int),
            "warmup": runs["warmup_steps"].astype(int),
            "lr": runs[key(rs, "lr")].astype(float),
            "seed": runs["seed"],
            "status": runs["status"],
            "loss": loss.fillna(l0),
        }
    )
    return df, l0


def _sensitivity(df: pd.DataFrame, l0: float) -> pd.DataFrame:
    """Wortsman et al.'s LR sensitivity per (placement, depth, warmup, seed): mean over the lr grid of
    min(loss, loss₀) − min over the grid."""
    rows = []
    for cell, grp in df.groupby(["placement", "depth", "warmup", "seed"], sort=False):
        capped = np.minimum(grp["loss"].to_numpy(dtype=float), l0)
        best = capped.min()
        rows.append(
            dict(zip(["placement", "depth", "warmup", "seed"], cell, strict=True))
            | {
                "sens": float(np.mean(capped - best)),
                "best": best,
                "best_lr": float(grp["lr"].iloc[capped.argmin()]),
            }
        )
    return pd.DataFrame(rows)


def _per_seed_contrast(s: pd.DataFrame, by: str, hi: Any, lo: Any) -> Estimate:
    """Per seed: mean over the other factors of sens(by=hi) − sens(by=lo); mean ± SE over seeds."""
    diffs = []
    others = [c for c in ("placement", "depth", "warmup") if c != by]
    for _, grp in s.groupby("seed"):
        a = grp[grp[by] == hi].set_index(others)["sens"]
        b = grp[grp[by] == lo].set_index(others)["sens"]
        both = a.index.intersection(b.index)
        if len(both):
            diffs.append(float((a[both] - b[both]).mean()))
    return estimate(diffs)


def evaluate_wortsman_lr_sensitivity(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "placement", ["pre", "post"])
    df, l0 = _lr_table(rs)
    if df["lr"].nunique() < 3:
        raise CannotEvaluate("LR sensitivity needs a grid of at least three learning rates")
    s = _sensitivity(df, l0)
    depths, warmups = sorted(s["depth"].unique()), sorted(s["warmup"].unique())
    checks = [
        check(
            "Post-LN is more sensitive to the learning rate than Pre-LN",
            "LR sensitivity E_η[min(loss(η), loss₀) − loss*] of Post-LN − Pre-LN, averaged over depths and "
            "warmups per seed; mean ± SE over seeds",
            _per_seed_contrast(s, "placement", "post", "pre"),
            LOSS_FLOOR,
            unit="nats",
        )
    ]
    if len(depths) > 1:
        checks.append(
            check(
                f"LR sensitivity grows with depth ({depths[0]} → {depths[-1]} blocks)",
                f"sensitivity at depth {depths[-1]} − at depth {depths[0]}, averaged over placements and "
                "warmups per seed",
                _per_seed_contrast(s, "depth", depths[-1], depths[0]),
                LOSS_FLOOR,
                unit="nats",
            )
        )
    if len(warmups) > 1:
        checks.append(
            check(
                f"Longer warmup ({warmups[0]} → {warmups[-1]} steps) lowers LR sensitivity",
                f"sensitivity with {warmups[0]} warmup steps − with {warmups[-1]}, averaged over placements "
                "and depths per seed",
                _per_seed_contrast(s, "warmup", warmups[0], warmups[-1]),
                LOSS_FLOOR,
                unit="nats",
            )
        )
    table = []
    for (pl, d, w), grp in s.groupby(["placement", "depth", "warmup"], sort=True):
        cell = df[(df["placement"] == pl) & (df["depth"] == d) & (df["warmup"] == w)]
        table.append(
            {
                "placement": pl,
                "depth": d,
                "warmup": w,
                "LR sensitivity (nats)": fmt_series(grp["sens"]),
                "best loss": fmt_series(grp["best"]),
                "best lr": ", ".join(f"{v:g}" for v in sorted(set(grp["best_lr"]))),
                "diverged": diverged_count(cell),
            }
        )
    lrs = ", ".join(f"{v:g}" for v in sorted(df["lr"].unique()))
    notes = [
        f"Learning-rate grid: {lrs}; loss₀ (step-0 val loss, mean over runs) = {l0:.3f} nats.",
        "Sensitivity is measured against each configuration's own best loss (loss*), as Wortsman et al. "
        "define it: a configuration that trains poorly at every learning rate scores as insensitive, so "
        "read it together with the best losses in the table.",
    ]
    return Outcome.of(checks, table=table, notes=notes)


def draw_wortsman_lr_sensitivity(rs: RunSet, extras: Extras) -> Drawn:
    df, l0 = _lr_table(rs)
    cells = sorted({(d, w) for d, w in zip(df["depth"], df["warmup"], strict=True)})
    ncols = min(len(cells), 4)
    nrows = math.ceil(len(cells) / ncols)
    fig = ReportFigure(figsize=(3.4 * ncols + 1.6, 3.2 * nrows + 0.7), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharey=True, squeeze=False)).ravel()
    g = group_labels(rs, ["placement"])
    colors = g.colors
    for ax, (d, w) in zip(axes, cells, strict=False):
        ax.grid(True, alpha=0.3, linewidth=0.6)
        for pl, grp in df[(df["depth"] == d) & (df["warmup"] == w)].groupby("placement", sort=False):
            stats = grp.groupby("lr")["loss"].agg(["mean", "std"])
            color = colors.get(pl, None)
            ax.errorbar(
                stats.index,
                stats["mean"],
                yerr=stats["std"],
                marker=g.markers.get(pl, "o"),
                mfc="white",
                ms=5,
                capsize=2,
                lw=1.5,
                color=color,
                label=pl,
            )
            div = grp[grp["status"] == "diverged"]
            ax.scatter(
                div["lr"], [l0] * len(div), marker="X", s=60, color=color, edgecolors="black", zorder=5
            )
        ax.axhline(l0, color="0.4", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_title(f"depth {d}, warmup {w}", fontsize=10)
        ax.set_xlabel("peak learning rate (log)")
    for ax in axes[len(cells) :]:
        ax.set_visible(False)
    axes[0].set_ylabel("final val loss (nats/token)")
    fig.suptitle(
        "Final loss vs learning rate (mean ± std over seeds; X: diverged, counted at loss₀ = dotted)",
        fontsize=10,
    )
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper", frameon=False)
    return [("lr", "Final validation loss against the learning rate, per depth and warmup.", fig)]


# ------------------------------------------------------------------------------- finding 8: Takase


def _early_ratio(rs: RunSet, run: str, depth: int, max_steps: int) -> float:
    first = run_metric(rs, run, names.grad_norm_layer(0))
    last = run_metric(rs, run, names.grad_norm_layer(depth - 1))
    window = max(1, int(0.2 * max_steps))
    first, last = first[first.index <= window], last[last.index <= window]
    if first.empty or last.empty or last.mean() <= 0:
        return math.nan
    return float(np.log(first.mean() / last.mean()))


def spike_count(rs: RunSet, run: str, flag: str) -> float:
    """Steps flagged as spikes in metrics.jsonl (spike/loss or spike/grad_norm); for loss spikes without
    flags, summary.json's spike_steps."""
    flags = run_metric(rs, run, flag)
    if not flags.empty:
        return float((flags > 0).sum())
    if flag == names.SPIKE_LOSS:
        return float(len(rs.runs.at[run, "spike_steps"] or []))
    return 0.0


def evaluate_takase_embed_scale(rs: RunSet, extras: Extras) -> Outcome:
    need(rs, "embed_scale", ["1.0", "sqrt_d"])
    ratio, spikes, table = {}, {}, []
    for scale in ("1.0", "sqrt_d"):
        runs = where(rs, embed_scale=scale)
        ratio[scale] = [
            _early_ratio(rs, run, int(r["depth"]), int(r["train.max_steps"])) for run, r in runs.iterrows()
        ]
        spikes[scale] = [spike_count(rs, run, names.SPIKE_LOSS) for run in runs.index]
        grad_spikes = [spike_count(rs, run, names.SPIKE_GRAD_NORM) for run in runs.index]
        table.append(
            {
                "embed_scale": scale,
                "runs": len(runs),
                "diverged": diverged_count(runs),
                "final val loss": fmt_series(loss_of(rs, embed_scale=scale)),
                "log(‖g_block0‖ / ‖g_last‖), first 20 %": fmt_series(ratio[scale], 2),
                "loss spikes per run": fmt_series(spikes[scale], 1),
                "grad-norm spikes per run": fmt_series(grad_spikes, 1),
            }
        )
    checks = [
        check(
            "Unscaled small embeddings give Pre-LN larger early-layer gradients",
            "log(mean ‖g‖ of block 0 / mean ‖g‖ of the last block) over the first 20 % of steps: "
            "embed_scale=1 − embed_scale=√d (Welch SE)",
            difference(ratio["1.0"], ratio["sqrt_d"]),
            LOG_FLOOR,
        ),
        check(
            "Unscaled small embeddings give more loss spikes",
            "loss spikes per run (metrics.spikes rule): embed_scale=1 − embed_scale=√d (Welch SE; noise floor "
            "half a spike)",
            difference(spikes["1.0"], spikes["sqrt_d"]),
            0.5,
        ),
    ]
    return Outcome.of(checks, table=table)


def draw_takase_embed_scale(rs: RunSet, extras: Extras) -> Drawn:
    g = group_labels(rs, ["embed_scale"])
    return [
        ("grad_layers", "Per-block gradient norm over training (mean over seeds).", plot_grad_heatmap(g)),
        ("grad_norm", "Global gradient norm, spikes marked.", plot_grad_norm(g)),
    ]


# ---------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Finding:
    number: int
    name: str  # the preset: configs/experiment/NAME.yaml
    title: str
    claim: str
    source: str
    core: bool  # part of `scripts/reproduce.py --core`
    evaluate: Callable[[RunSet, Extras], Outcome]
    draw: Callable[[RunSet, Extras], Drawn]
    extras: tuple[str, ...] = field(default=())  # extra measurements run after the sweep ("profile")

    @property
    def cite(self) -> str:
        """The source in a few words: 'Xiong et al. 2020'."""
        head = self.source.split(",")[0].split(" (")[0]
        return head.replace("*", "").strip().rstrip(".")

    def __repr__(self) -> str:
        return f"<Finding {self.number}: {self.name}>"


FINDINGS: dict[str, Finding] = {
    f.name: f
    for f in (
        Finding(
            1,
            "xiong_grad_profile",
            "Gradient profile at initialisation: Post-LN vs Pre-LN",
            "At initialisation, Post-LN's gradient is concentrated near the output and its last-layer gradient "
            "does not shrink with depth, while Pre-LN's shrinks roughly as 1/√L.",
            "Xiong et al. 2020, *On Layer Normalization in the Transformer Architecture* (ICML), §3 and Fig. 3.",
            True,
            evaluate_xiong_grad_profile,
            draw_xiong_grad_profile,
        ),
        Finding(
            2,
            "xiong_warmup",
            "Warmup and Post-LN",
            "Without warmup, Post-LN trains much worse (or diverges) at a learning rate where Pre-LN is fine; "
            "warmup closes most of that gap.",
            "Xiong et al. 2020, *On Layer Normalization in the Transformer Architecture* (ICML), §3.1, Fig. 2.",
            True,
            evaluate_xiong_warmup,
            draw_xiong_warmup,
        ),
        Finding(
            3,
            "deepnet_model_update",
            "DeepNorm vs Post-LN at depth",
            "At depth, Post-LN's model update ‖F(x,θ_t) − F(x,θ_0)‖ jumps early then stalls and its loss "
            "plateaus, while DeepNorm updates steadily and trains.",
            "Wang et al. 2022, *DeepNet: Scaling Transformers to 1,000 Layers*, §3, Fig. 3.",
            False,
            evaluate_deepnet_model_update,
            draw_deepnet_model_update,
        ),
        Finding(
            4,
            "periln_act_growth",
            "Residual-stream growth: Pre-LN vs double (Peri-LN)",
            "The residual stream's RMS grows with layer index and over training under Pre-LN, much less under "
            "double (Peri-LN) placement.",
            "Kim et al. 2025, *Peri-LN: Revisiting Layer Normalization in the Transformer Architecture*.",
            True,
            evaluate_periln_act_growth,
            draw_periln_act_growth,
        ),
        Finding(
            5,
            "rmsnorm_speed",
            "RMSNorm vs LayerNorm: loss and speed",
            "RMSNorm matches LayerNorm's loss within seed noise and is faster per step.",
            "Zhang & Sennrich 2019, *Root Mean Square Layer Normalization* (NeurIPS); runtime share of "
            "normalization: Ivanov et al. 2021, *Data Movement Is All You Need* (cited in the background notes).",
            True,
            evaluate_rmsnorm_speed,
            draw_rmsnorm_speed,
            ("profile",),
        ),
        Finding(
            6,
            "batchnorm_batch_size",
            "BatchNorm vs LayerNorm across batch sizes",
            "BatchNorm suits Transformers poorly: it trains worse than LayerNorm, the more so the smaller the "
            "batch its statistics come from.",
            "The background notes (shared/seeds/bn-ln-rmsnorm-pre-post.md, add-and-norm-deepnorm.md).",
            False,
            evaluate_batchnorm_batch_size,
            draw_batchnorm_batch_size,
        ),
        Finding(
            7,
            "wortsman_lr_sensitivity",
            "Learning-rate sensitivity",
            "Learning-rate sensitivity E_η[min(loss(η), loss₀) − loss*] over a grid of learning rates is higher "
            "for Post-LN than Pre-LN, grows with depth, and falls with longer warmup.",
            "Wortsman et al. 2023, *Small-scale proxies for large-scale Transformer training instabilities*, §3.",
            False,
            evaluate_wortsman_lr_sensitivity,
            draw_wortsman_lr_sensitivity,
        ),
        Finding(
            8,
            "takase_embed_scale",
            "Embedding scale and early-layer gradients",
            "Small embeddings (std 0.02, unscaled) give Pre-LN large early-layer gradients and more loss spikes "
            "than embeddings scaled by √d.",
            "Takase et al. 2023, *Spike No More: Stabilizing the Pre-training of Large Language Models*, §3–4.",
            False,
            evaluate_takase_embed_scale,
            draw_takase_embed_scale,
        ),
    )
}
CORE = tuple(f.name for f in FINDINGS.values() if f.core)


def load_extras(sweep_dir: str | Path) -> Extras:
    """Measurements stored next to a sweep's runs (the norm profile of finding 5)."""
    extras: Extras = {}
    path = Path(sweep_dir) / PROFILE_FILE
    if path.is_file():
        extras["profile"] = json.loads(path.read_text())
    return extras


def evaluate(name: str, rs: RunSet, extras: Extras | None = None) -> Outcome:
    """The finding's outcome from loaded runs; an inconclusive Outcome saying why if it cannot be computed."""
    try:
        return FINDINGS[name].evaluate(rs, extras or {})
    except (CannotEvaluate, NoData) as e:
        return Outcome.of([], notes=[f"Could not evaluate: {e}."])


def evaluate_sweep(name: str, sweep_dir: str | Path) -> tuple[RunSet, Outcome]:
    """Load a preset's sweep directory and evaluate its finding (the notebook's one-liner)."""
    rs = load_runs(sweep_dir)
    return rs, evaluate(name, rs, load_extras(sweep_dir))


def finding_of(rs: RunSet) -> Finding | None:
    """The finding whose preset produced these runs (by experiment_name), if any."""
    if "experiment_name" not in rs.runs.columns:
        return None
    found = [FINDINGS[n] for n in rs.runs["experiment_name"].dropna().unique() if n in FINDINGS]
    return found[0] if len(found) == 1 else None
