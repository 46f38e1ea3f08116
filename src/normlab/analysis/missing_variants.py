"""The note under a figure naming the variants it leaves out, and why: what each report figure draws
(`FAMILIES`: a metric, or the prefix of a per-layer family) and the reason a run may not have it (the model
update is logged only where a block normalises the residual stream itself, for one).

Its own module because it is not a reading of the figure's numbers (captions) but of which runs have the
figure's data at all. docs/metrics.md's table of figures shows each one's metric and reason from
FAMILIES (`metrics_reference`).
"""

from __future__ import annotations

from normlab.analysis.load import RunSet
from normlab.analysis.stats import finite, layer_columns
from normlab.metrics import names

# what each figure draws (a metric, or the prefix of a per-layer family), and why a run may not have it
FAMILIES = {
    "loss": (names.LOSS, "no training loss in metrics.jsonl"),
    "grad_norm": (names.GRAD_NORM, "no gradient norm in metrics.jsonl"),
    "grad_profile_init": ("grad_norm/layer_", "no step-0 row with per-block gradient norms"),
    "grad_norm_layers": ("grad_norm/layer_", "no per-block gradient norms (metrics.enabled=false)"),
    "act_rms": ("act_rms/layer_", "no instrumented step (metrics.enabled=false, or it stopped first)"),
    "attn_max_logit": (
        "attn_max_logit/layer_",
        "no instrumented step (metrics.enabled=false, or it stopped first)",
    ),
    "update_ratio": (
        "update_ratio/layer_",
        "no instrumented update (metrics.enabled=false, or it stopped first)",
    ),
    "model_update": (
        names.MODEL_UPDATE,
        "the model update is logged only where a block normalises the residual stream itself — post, "
        "deepnorm, mixln, resi_dual (metrics.model_update=auto; metrics.model_update=true logs it for any run)",
    ),
    "layer_ablation": ("layer_ablation/layer_", "metrics.layer_ablation is off for them"),
}


def missing(key: str, rs: RunSet) -> str | None:
    """'Not drawn: `ln, pre`, `rms, pre` — the model update is logged only …' for the variants that trained
    but have none of the figure's data, None when every variant is drawn."""
    if key not in FAMILIES:
        return None
    family, why = FAMILIES[key]
    cols = [
        c for c in rs.metrics.columns if c == family or (family.endswith("_") and str(c).startswith(family))
    ]
    if key == "grad_profile_init":
        cols = list(layer_columns(rs.metrics.columns, names.grad_norm_layer).values())
    have: set[str] = set()
    if cols:
        m = rs.metrics
        if key == "grad_profile_init":
            m = m[m[names.STEP] == 0]
        rows = m[cols].apply(finite).notna().any(axis=1)
        runs = set(m.loc[rows, "run"])
        have = {str(rs.runs.loc[r, "variant"]) for r in runs if r in rs.runs.index}
    trained = [v for v in rs.variants if (rs.valid["variant"] == v).any()]
    absent = [v for v in trained if v not in have]
    if not absent or len(absent) == len(trained):
        return None
    return f"Not drawn: {', '.join(f'`{v}`' for v in absent)} — {why}."
