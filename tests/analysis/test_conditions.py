"""The report's opening lines on crafted runs: the settings the arms share (and only those), and whether the
runs had converged — a validation loss still falling over the last quarter makes the comparison one "at a
fixed budget of N steps"; a flat one reads "levelled off"; one seed reads untested. Each check can come out
either way: the same sweep with the last evaluations moved flips it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from normlab.analysis import load_runs, narrative, write_report
from normlab.analysis.conditions import (
    FALLING,
    LEVELLED,
    LEVELLED_NATS,
    RISING,
    UNDECIDED,
    Tail,
    conditions_sentence,
    convergence_sentence,
    fixed_budget,
    shared_settings,
    tails,
)
from normlab.metrics import names


def set_config(root: Path, **values) -> None:
    """Set dotted config keys (model.tie_embeddings=...) in every run's .hydra/config.yaml of a sweep."""
    for path in root.glob("*/.hydra/config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        for key, value in values.items():
            node = cfg
            *parents, leaf = key.split("__")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def set_final_val(run_dir: Path, value: float) -> None:
    """Move a run's final evaluation (the row at step MAX_STEPS) and its summary to `value`."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows[-1][names.VAL_LOSS] = value
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.update(final_val_loss=value, best_val_loss=min(value, summary["best_val_loss"] or value))
    (run_dir / "summary.json").write_text(json.dumps(summary))


def sweep(fab, root: Path, finals: dict[str, list[float]]):
    """ln × placement, one run per value; the crafted val loss at step 10 is 5.05 (conftest: 6 − 0.1·10 + 0.05),
    the final one (step 20) the value given."""
    specs = [
        fab.spec("ln", placement, seed, final_val=v, best_val=v, final_train=v)
        for placement, values in finals.items()
        for seed, v in enumerate(values)
    ]
    path = fab.write_sweep(root, specs)
    set_config(path, model__tie_embeddings=False)
    return path


def test_the_conditions_name_what_every_run_shares_and_only_that(fab, tmp_path):
    path = sweep(fab, tmp_path / "s", {"pre": [2.5, 2.52, 2.48], "post": [2.7, 2.73, 2.69]})
    rs = load_runs(path)
    shared = shared_settings(rs)
    assert shared[0] == "model d_model 64, 3 blocks, 2 heads, context 64, 1.23M parameters"
    assert "norm=ln" in shared and not any(s.startswith("placement=") for s in shared)  # placement differs
    assert "LM head untied (model.tie_embeddings=false)" in shared
    assert "lr 0.003 (cosine schedule)" in " ".join(shared)
    assert "warm-up 100 of 20 steps, batch 8 × 64 tokens" in shared
    assert shared[-1] == "data=synthetic (vocab 512)"
    sentence = conditions_sentence(rs)
    assert sentence.startswith("These runs differ in placement (and seed) and share everything else: ")
    # a setting that differs is no longer stated as shared, and the sentence names it as compared
    set_config(path, optim={"name": "adamw", "lr": 0.001, "betas": [0.9, 0.95]})
    (path / "0_ln-pre-L3-w100-s0" / ".hydra" / "config.yaml").write_text(
        (path / "0_ln-pre-L3-w100-s0" / ".hydra" / "config.yaml").read_text().replace("0.001", "0.003")
    )
    rs = load_runs(path)
    assert not any(s.startswith("lr ") for s in shared_settings(rs))
    assert "lr" in conditions_sentence(rs).split(" and share")[0]


def test_still_falling_makes_it_a_fixed_budget_and_flat_reads_levelled_off(fab, tmp_path):
    # falling: every run ends ~2.5 nats below its step-10 evaluation
    falling = load_runs(sweep(fab, tmp_path / "f", {"pre": [2.5, 2.52, 2.48], "post": [2.7, 2.73, 2.69]}))
    assert {t.state for t in tails(falling)} == {FALLING} and fixed_budget(falling)
    text = convergence_sentence(falling)
    assert text.startswith("At a fixed budget of 20 steps: the validation loss was still falling at the end ")
    assert "in every variant" in text and "step 10 → 20" in text
    summary = narrative.report_sentences(falling)["summary"][0]
    assert summary.startswith("Lowest final validation loss after 20 steps: ")
    report = write_report(falling, tmp_path / "rf", figures=["loss"]).path.read_text()
    top = report.split("## Summary")[0]
    assert "**Conditions.** These runs differ in placement" in top
    assert "**Convergence.** At a fixed budget of 20 steps" in top
    # the same sweep with the final evaluations back at the step-10 level (5.05): levelled off
    flat = sweep(fab, tmp_path / "l", {"pre": [5.051, 5.049, 5.050], "post": [5.052, 5.048, 5.050]})
    rs = load_runs(flat)
    assert {t.state for t in tails(rs)} == {LEVELLED} and not fixed_budget(rs)
    assert convergence_sentence(rs).startswith(
        "After 20 steps the validation loss had levelled off in every variant"
    )
    assert "after 20 steps" not in narrative.report_sentences(rs)["summary"][0]
    # one variant still falling: the whole comparison is at a fixed budget, that variant named
    set_final_val(flat / "0_ln-pre-L3-w100-s0", 4.0)
    set_final_val(flat / "1_ln-pre-L3-w100-s1", 4.1)
    set_final_val(flat / "2_ln-pre-L3-w100-s2", 4.05)
    rs = load_runs(flat)
    assert fixed_budget(rs)
    assert "still falling at the end in `pre`, so " in convergence_sentence(rs)


def test_a_single_seed_reads_its_point_value_untested(fab, tmp_path):
    rs = load_runs(sweep(fab, tmp_path / "s", {"pre": [2.5], "post": [5.05]}))
    by_variant = {t.variant: t for t in tails(rs)}
    assert by_variant["pre"].interval is None and by_variant["pre"].state == FALLING
    assert by_variant["post"].state == LEVELLED
    assert "n = 1, untested" in convergence_sentence(rs)


def test_the_states_follow_the_interval():
    """Each state from an interval placed by hand against ±LEVELLED_NATS."""
    m = LEVELLED_NATS

    def state(lo, hi):
        return Tail("v", (lo + hi) / 2, (lo, hi), 3, 150, 200).state

    assert state(-0.5, -0.2) == FALLING
    assert state(-m / 2, m / 2) == LEVELLED
    assert state(-m / 2, -m / 4) == LEVELLED  # falling, but by less than the band: levelled off
    assert state(0.2, 0.5) == RISING
    assert state(-0.5, m / 2) == UNDECIDED  # reaches both into the band and past it
    assert state(-0.5, 0.5) == UNDECIDED
