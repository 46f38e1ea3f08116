"""The findings `scripts/reproduce.py` re-runs: one module per paper (claim, source, analysis, figures),
collected here in report order. Each preset is `configs/experiment/findings/NAME.yaml`; the verdict
rules are in `normlab.study.verdicts`.

    from normlab.study.findings import FINDINGS, evaluate, evaluate_sweep
    rs, outcome = evaluate_sweep("xiong_warmup", "outputs/reproduce/…/sweeps/xiong_warmup")
    outcome.verdict, outcome.checks, outcome.table, outcome.notes
    figures = FINDINGS["xiong_warmup"].draw(rs, {})  # [(key, caption, matplotlib Figure)]

Adding a finding: a module here that defines `FINDING = Finding(...)` (number, preset name, title, claim,
source, evaluate, draw; `measurements` for anything measured besides the sweep's runs), its entry in
`MODULES`, and the preset `configs/experiment/findings/NAME.yaml`. What the finding modules share, by theme:
`_finding` (Finding and its parts), `_runs` (selecting runs, their losses and metric series), `_learning`
(did they learn?), `_compare` (two arms' difference, paired by seed), `_format` (the tables' numbers),
`_depth` (what the depth findings measure).
"""

from __future__ import annotations

from pathlib import Path

from normlab.analysis.load import RunSet, load_runs
from normlab.analysis.plots import NoData
from normlab.study.findings import (
    batchnorm,
    deepnet,
    dyt,
    lnscale,
    mixln,
    periln,
    rmsnorm,
    takase,
    tied_embeddings,
    wortsman_qk_norm,
    wortsman_z_loss,
    xiong_grad_profile,
    xiong_warmup,
)
from normlab.study.findings._finding import PRESET_GROUP, CannotEvaluate, Extras, Finding, Measurement
from normlab.study.verdicts import Outcome

MODULES = (
    xiong_grad_profile,
    xiong_warmup,
    deepnet,
    periln,
    rmsnorm,
    batchnorm,
    wortsman_qk_norm,
    wortsman_z_loss,
    takase,
    tied_embeddings,
    dyt,
    lnscale,
    mixln,
)
FINDINGS: dict[str, Finding] = {m.FINDING.name: m.FINDING for m in MODULES}
CORE = tuple(f.name for f in FINDINGS.values() if f.core)


def evaluate(name: str, rs: RunSet, extras: Extras | None = None) -> Outcome:
    """The finding's outcome from loaded runs; an inconclusive Outcome saying why if it cannot be computed."""
    try:
        return FINDINGS[name].evaluate(rs, extras or {})
    except (CannotEvaluate, NoData) as e:
        return Outcome.of([], notes=[f"Could not evaluate: {e}."])


def evaluate_sweep(name: str, sweep_dir: str | Path) -> tuple[RunSet, Outcome]:
    """Load a preset's sweep directory and evaluate its finding, with the measurements stored beside it
    (the notebook's one-liner)."""
    rs = load_runs(sweep_dir)
    return rs, evaluate(name, rs, FINDINGS[name].load_extras(sweep_dir))


def finding_of(rs: RunSet) -> Finding | None:
    """The finding whose preset produced these runs (by experiment_name), if any."""
    if "experiment_name" not in rs.runs.columns:
        return None
    found = [FINDINGS[n] for n in rs.runs["experiment_name"].dropna().unique() if n in FINDINGS]
    return found[0] if len(found) == 1 else None


__all__ = [
    "CORE",
    "FINDINGS",
    "MODULES",
    "PRESET_GROUP",
    "CannotEvaluate",
    "Extras",
    "Finding",
    "Measurement",
    "evaluate",
    "evaluate_sweep",
    "finding_of",
]
