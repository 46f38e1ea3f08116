"""Loading fabricated run directories: discovery, the runs table, metrics frames, grouping, seed averaging."""

from __future__ import annotations

import math
import statistics

import pytest

from normlab.analysis import layer_columns, load_runs, seed_stats, varying_keys
from normlab.analysis import load as load_mod
from normlab.analysis.load import UnknownKey
from normlab.metrics import names


def test_finds_every_run_once(sweep):
    rs = load_runs(sweep.path)
    assert len(rs.runs) == len(sweep.specs)
    assert list(rs.runs.index) == sorted(rs.runs.index, key=lambda r: int(r.split("_")[0]))
    one = next(sweep.path.glob("0_*"))
    assert list(load_runs(one).runs.index) == [one.name]
    both = load_runs([sweep.path, one])  # a run given twice (alone and inside its sweep) is loaded once
    assert len(both.runs) == len(sweep.specs)


def test_runs_table_holds_summary_and_resolved_config(sweep, fab):
    runs = load_runs(sweep.path).runs
    assert runs["status"].tolist() == ["completed", "completed", "completed", "diverged", "invalid"]
    invalid = runs[runs["status"] == "invalid"].iloc[0]
    assert invalid["reason"] == fab.INVALID_REASON
    assert (invalid["norm"], invalid["placement"]) == ("deepnorm", "pre")
    first = runs.iloc[0]
    assert first["final_val_loss"] == 2.50 and first["n_params"] == 1_234_567
    # interpolations resolved: ${model.context_length}, ${depth}
    assert first["train.seq_len"] == 64 and first["model.n_layers"] == fab.DEPTH
    assert first["train.grad_clip"] == 1.0 and first["seed"] == 0
    assert runs.loc[runs.index[3], "diverged_at"] == 15


def test_metrics_frames(sweep, fab):
    rs = load_runs(sweep.path)
    m = rs.metrics
    run0, diverged = rs.runs.index[0], rs.runs.index[3]
    r0 = m[m["run"] == run0].set_index(names.STEP)
    assert r0.loc[7, names.LOSS] == pytest.approx(fab.train_loss(sweep.specs[0], 7))
    assert r0.loc[fab.MAX_STEPS, names.VAL_LOSS] == 2.50  # the final evaluation row
    assert math.isnan(r0.loc[fab.MAX_STEPS, names.LOSS])
    d = m[m["run"] == diverged].set_index(names.STEP)
    assert d.index.max() == 15
    assert math.isnan(d.loc[15, names.LOSS]) and math.isinf(
        d.loc[15, names.GRAD_NORM]
    )  # "nan", "inf" strings
    assert m[m["run"] == rs.runs.index[4]].empty  # the invalid run has no metrics
    long = rs.long
    assert set(long.columns) == {"run", names.STEP, "metric", "value"}
    row = long[(long["run"] == run0) & (long["metric"] == names.LOSS) & (long[names.STEP] == 3)]
    assert row["value"].item() == pytest.approx(fab.train_loss(sweep.specs[0], 3))
    assert layer_columns(m.columns, names.grad_norm_layer) == {
        i: names.grad_norm_layer(i) for i in range(fab.DEPTH)
    }


def test_grouping_picks_exactly_the_differing_keys(sweep):
    rs = load_runs(sweep.path)
    # norm (ln / deepnorm), placement and seed differ; name, model.n_layers etc. are derived, the rest equal
    assert rs.varying == ["norm.name", "placement.name", "seed"]
    assert rs.group_keys == ["norm.name", "placement.name"]
    assert rs.variants == ["ln, pre", "ln, post", "deepnorm, pre"]
    assert rs.runs["variant"].tolist() == ["ln, pre", "ln, pre", "ln, post", "ln, post", "deepnorm, pre"]
    assert len(set(rs.colors.values())) == 3


def test_regroup(sweep):
    rs = load_runs(sweep.path)
    per_run = rs.regroup("run")
    assert per_run.runs["variant"].tolist()[:2] == ["ln, pre, seed=0", "ln, pre, seed=1"]
    assert per_run.runs["variant"].is_unique
    by_placement = rs.regroup(["placement"])
    assert by_placement.group_keys == ["placement.name"] and by_placement.variants == ["pre", "post"]
    assert load_runs(sweep.path, group_by="placement").variants == ["pre", "post"]
    with pytest.raises(UnknownKey, match="no config key 'nope'"):
        rs.regroup(["nope"])


def test_varying_keys_rules():
    base = {
        "depth": 2,
        "model.n_layers": 2,
        "norm.name": "ln",
        "norm.eps": 1e-5,
        "name": "a",
        "optim.lr": 0.1,
    }
    other = {
        "depth": 4,
        "model.n_layers": 4,
        "norm.name": "rms",
        "norm.eps": 1e-6,
        "name": "b",
        "optim.lr": 0.1,
    }
    # model.n_layers is ${depth}; norm.eps just follows norm.name; name is never a variant key
    assert varying_keys([base, other], derived={"model.n_layers"}) == ["depth", "norm.name"]
    # a group member that varies within one choice is a real axis
    third = dict(other, **{"norm.eps": 1e-3, "name": "c"})
    assert varying_keys([base, other, third], derived={"model.n_layers"}) == [
        "depth",
        "norm.name",
        "norm.eps",
    ]
    # a key present in only some runs differs
    assert varying_keys([base, dict(base, **{"model.init": "xavier"})]) == ["model.init"]
    # ... unless those runs leave it unset: a knob added after the older runs (train.eval_at: []) is not an
    # axis of the sweep (it labelled a finding's calibration arms "eval_at=nan" and "eval_at=")
    newer = [dict(base, **{"train.eval_at": ()}), dict(base, **{"train.eval_at": None})]
    assert varying_keys([base, *newer]) == []
    assert varying_keys([base, dict(base, **{"train.eval_at": (100,)})]) == ["train.eval_at"]


def test_seed_stats_mean_and_std_by_hand(sweep, fab):
    rs = load_runs(sweep.path)
    stats = seed_stats(rs, names.grad_norm_layer(1))
    row = stats[(stats["variant"] == "ln, pre") & (stats[names.STEP] == 0)].iloc[0]
    values = [2 * 1.0, 2 * 1.2]  # grad_layer(i=1, step 0) = (i + 1) · base, bases 1.0 and 1.2
    assert row["mean"] == pytest.approx(statistics.mean(values))
    assert row["std"] == pytest.approx(statistics.stdev(values))
    assert row["n"] == 2
    # the diverged seed's non-finite last loss is left out: one value at step 15
    loss = seed_stats(rs, names.LOSS)
    post15 = loss[(loss["variant"] == "ln, post") & (loss[names.STEP] == 15)].iloc[0]
    assert post15["n"] == 1 and post15["mean"] == pytest.approx(fab.train_loss(sweep.specs[2], 15))


def test_missing_summary_and_torn_metrics_line(fresh_sweep):
    run = next(fresh_sweep.path.glob("0_*"))
    (run / "summary.json").unlink()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 21, "loss": 1.')  # a killed writer's half line
    warnings = []
    rs = load_runs(fresh_sweep.path, on_warning=warnings.append)
    row = rs.runs.loc[run.name]
    assert row["status"] == "unknown" and row["final_val_loss"] == 2.50
    assert any("no summary.json" in w for w in warnings) and any("unreadable" in w for w in warnings)


def test_empty_or_missing_paths(tmp_path):
    with pytest.raises(load_mod.NoRunsFound):
        load_runs(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_runs(tmp_path / "nope")


def test_file_names_match_the_training_side():
    from normlab import summary
    from normlab.train import run_dir

    assert (load_mod.METRICS_FILE, load_mod.SUMMARY_FILE) == (run_dir.METRICS_FILE, summary.SUMMARY_FILE)


def test_interpolated_keys_present_in_some_runs_only_are_not_variants(tmp_path, fab):
    # ln has norm.bias, rms does not: model.norm (${norm}) resolves to a bias key in the ln run only
    path = fab.write_sweep(
        tmp_path / "s",
        [
            fab.spec("ln", "pre", 0, final_val=2.0, best_val=2.0, final_train=2.0),
            fab.spec("rms", "pre", 0, final_val=2.1, best_val=2.1, final_train=2.1),
        ],
    )
    rs = load_runs(path)
    assert rs.runs["model.norm.bias"].tolist()[0] is True
    assert rs.varying == ["norm.name"] and rs.variants == ["ln", "rms"]
