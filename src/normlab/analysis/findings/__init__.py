"""The findings `scripts/reproduce.py` re-runs: one module per paper (claim, source, analysis, figures),
collected here in report order. Each preset is `configs/experiment/NAME.yaml`; the verdict rules are in
`normlab.analysis.verdicts`.

    from normlab.analysis.findings import FINDINGS, evaluate, evaluate_sweep
    rs, outcome = evaluate_sweep("xiong_warmup", "outputs/reproduce/…/sweeps/xiong_warmup")
    outcome.verdict, outcome.checks, outcome.table, outcome.notes
    figures = FINDINGS["xiong_warmup"].draw(rs, {})  # [(key, caption, matplotlib Figure)]

Adding a finding: a module here that defines `FINDING = Finding(...)` (number, preset name, title, claim,
source, evaluate, draw), its entry in `MODULES`, and the preset `configs/experiment/NAME.yaml`.
"""

from __future__ import annotations

from pathlib import Path

from normlab.analysis.findings import (
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
from normlab.analysis.findings._common import CannotEvaluate, Drawn, Extras, Finding
from normlab.analysis.findings.rmsnorm import PROFILE_FILE, load_profile
from normlab.analysis.findings.robustness import Perturbation, Robustness, Variation, robustness
from normlab.analysis.load import RunSet, load_runs
from normlab.analysis.plots import NoData
from normlab.analysis.verdicts import Outcome

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


def load_extras(sweep_dir: str | Path) -> Extras:
    """Measurements stored next to a sweep's runs (the norm profile of finding 5)."""
    profile = load_profile(sweep_dir)
    return {"profile": profile} if profile is not None else {}


def evaluate(name: str, rs: RunSet, extras: Extras | None = None) -> Outcome:
    """The finding's outcome from loaded runs; an inconclusive Outcome saying why if it cannot be computed."""
    try:
        return FINDINGS[name].evaluate(rs, extras or {})
    except (CannotEvaluate, NoData) as e:
        return Outcome.of([], notes=[f"Could not evaluate: {e}."])


PERTURBED_SUFFIX = ".perturbed"  # sweeps/NAME.perturbed holds the preset's run under its perturbation


def perturbed_dir(sweep_dir: str | Path) -> Path:
    path = Path(sweep_dir)
    return path.with_name(path.name + PERTURBED_SUFFIX)


def robustness_of(name: str, rs: RunSet, verdict: str, sweep_dir: str | Path | None = None) -> Robustness:
    """Leave-one-seed-out on `rs`, and the verdict of the perturbed sweep beside `sweep_dir` if it ran."""
    finding = FINDINGS[name]
    extras = load_extras(sweep_dir) if sweep_dir is not None else {}
    perturbed: list[Variation] = []
    other = perturbed_dir(sweep_dir) if sweep_dir is not None else None
    if finding.perturbation is not None and other is not None and other.is_dir():
        try:
            prs = load_runs(other)
        except Exception as e:  # a broken second sweep must not lose the first one's verdict
            perturbed.append(Variation(f"{finding.perturbation.label} (could not be loaded: {e})", verdict))
        else:
            perturbed.append(
                Variation(
                    finding.perturbation.label, evaluate(name, prs, load_extras(other) or extras).verdict
                )
            )
    return robustness(lambda sub: evaluate(name, sub, extras), rs, verdict, perturbed)


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


__all__ = [
    "CORE",
    "FINDINGS",
    "PROFILE_FILE",
    "CannotEvaluate",
    "Drawn",
    "Extras",
    "Finding",
    "evaluate",
    "evaluate_sweep",
    "finding_of",
    "load_extras",
    "Perturbation",
    "Robustness",
    "perturbed_dir",
    "robustness_of",
]
