"""Figures and report.md on fabricated sweeps: every figure drawn, numbers equal to the crafted ones."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest
from drawn import PNG_SIGNATURE as PNG
from drawn import assert_drawn

from normlab.analysis import (
    FIGURES,
    NoData,
    grid_cells,
    load_runs,
    plot_act_rms,
    plot_grad_norm,
    plot_loss,
    write_report,
)
from normlab.analysis.load import UnknownKey


def ms(values: list[float]) -> str:
    """mean ± sample std, formatted as the report does, computed independently."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory):
    rs = load_runs(sweep.path)
    return rs, write_report(rs, tmp_path_factory.mktemp("report"))


def table_row(markdown: str, first_cell: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row starting with {first_cell!r}")


def test_every_figure_is_drawn(report):
    _, rep = report
    expected = {spec.key: spec.filename for spec in FIGURES} | {"grid": "grid_final_val_loss.png"}
    assert {k: p.name for k, p in rep.figures.items()} == expected
    for path in rep.figures.values():
        assert_drawn(path)
    assert rep.skipped == {}
    text = rep.path.read_text()
    for filename in expected.values():
        assert f"]({filename})" in text


def test_summary_numbers_equal_the_crafted_ones(report):
    _, rep = report
    text = rep.path.read_text()
    header = table_row(text, "variant")
    pre = dict(zip(header, table_row(text, "ln, pre"), strict=True))
    post = dict(zip(header, table_row(text, "ln, post"), strict=True))
    assert pre["final val loss"] == ms([2.50, 2.70]) == "2.600 ± 0.141"
    assert pre["best val loss"] == ms([2.48, 2.65])
    assert pre["final train loss"] == ms([2.40, 2.60])
    assert pre["spikes/run"] == "1.0" and pre["diverged"] == "0/2 (0%)"
    assert pre["tokens/s"] == "11,000" and pre["params"] == "1.23M" and pre["runs"] == "2"
    # ln-post: seed 1 diverged, so only seed 0 has a final val loss; both have a best val loss
    assert post["final val loss"] == ms([3.10]) == "3.100"
    assert post["best val loss"] == ms([3.00, 3.40])
    assert post["final train loss"] == ms([3.05, 3.60])
    assert post["spikes/run"] == "0.5" and post["diverged"] == "1/2 (50%)" and post["tokens/s"] == "10,000"
    # the invalid variant has no summary row
    assert "| deepnorm, pre | 1 |" not in text
    csv = pd.read_csv(rep.out_dir / "summary.csv").set_index("variant")
    assert csv.loc["ln, pre", "final_val_loss_mean"] == pytest.approx(2.6)
    assert csv.loc["ln, pre", "final_val_loss_std"] == pytest.approx(statistics.stdev([2.5, 2.7]))
    assert csv.loc["ln, post", "divergence_rate"] == 0.5
    assert csv.loc["ln, pre", "n_spikes_total"] == 2


def test_diverged_and_invalid_runs_are_listed(report, fab):
    rs, rep = report
    text = rep.path.read_text()
    assert "## Diverged runs" in text and "## Invalid runs" in text
    diverged = table_row(text, rs.runs.index[3])
    assert diverged[:4] == [rs.runs.index[3], "ln, post", "1", "15"]
    invalid = table_row(text, rs.runs.index[4])
    assert invalid == [rs.runs.index[4], "deepnorm", "pre", fab.INVALID_REASON]
    assert "Status: 3 completed, 1 diverged, 1 invalid." in text
    assert "grouped by the config values that differ between them: **norm**, **placement**" in text


def test_figures_without_data_are_skipped_with_a_note(bare_sweep, tmp_path):
    rs = load_runs(bare_sweep.path)
    rep = write_report(rs, tmp_path)
    assert set(rep.figures) == {"loss", "grad_norm", "grad_profile_init", "grad_norm_layers"}
    assert set(rep.skipped) == {
        "Residual-stream RMS vs layer",
        "Max attention logit per layer",
        "Update ratio per layer",
        "Model update since initialisation",
        "Layer importance: loss with each block skipped",
        "Grid of final val loss",  # only placement varies here
    }
    assert rep.skipped["Grid of final val loss"] == "fewer than two config keys vary between these runs"
    text = rep.path.read_text()
    assert "Skipped (no data for them in these runs):" in text
    assert "- Residual-stream RMS vs layer: no residual-stream RMS metrics (act_rms/layer_i)." in text
    with pytest.raises(NoData):
        plot_act_rms(rs)


def test_grid_cells_and_figure(grid_sweep, tmp_path):
    rs = load_runs(grid_sweep.path)
    assert rs.group_keys == ["depth", "warmup_steps"]
    cells = grid_cells(rs, "depth", "warmup_steps")[()]
    assert cells[(2, 0)].mean == pytest.approx(3.1)
    assert cells[(2, 0)].std == pytest.approx(statistics.stdev([3.0, 3.2]))
    assert (cells[(6, 0)].mean, cells[(6, 0)].n_diverged, cells[(6, 0)].n) == (None, 2, 2)
    assert (cells[(6, 100)].mean, cells[(6, 100)].std, cells[(6, 100)].n_diverged) == (2.6, None, 1)
    rep = write_report(rs, tmp_path, figures=["grid"])  # exactly two keys vary: chosen without --grid
    assert set(rep.figures) == {"grid"}
    assert "### Grid of final val loss over depth × warmup_steps" in rep.path.read_text()
    rep = write_report(rs, tmp_path / "b", figures=["grid"], grid="warmup_steps,depth")
    assert "over warmup_steps × depth" in rep.path.read_text()


def test_grid_needs_known_keys_and_fails_before_drawing(sweep, tmp_path):
    rs = load_runs(sweep.path)
    with pytest.raises(UnknownKey, match="no config key 'nope'"):
        write_report(rs, tmp_path, grid="depth,nope")
    assert not list(tmp_path.glob("*.png"))


def test_one_colour_per_variant_in_every_figure(sweep):
    rs = load_runs(sweep.path)
    for fig in (plot_loss(rs, logx=True, smooth=3), plot_grad_norm(rs)):
        handles = fig.legends[0].legend_handles
        colors = {h.get_label().split("  (n=")[0]: h.get_color() for h in handles if "  (n=" in h.get_label()}
        assert colors == {v: rs.colors[v] for v in ("ln, pre", "ln, post")}


def test_figures_show_in_notebooks_without_pyplot(sweep):
    rs = load_runs(sweep.path)
    assert plot_grad_norm(rs)._repr_png_()[:8] == PNG
    assert repr(rs).startswith(
        "<RunSet: 5 runs (3 completed, 1 diverged, 1 invalid) in 3 variant(s) grouped by norm"
    )


def test_throughput_carries_its_context(fab, tmp_path):
    """Two runs trained at once, a third after them: the report says so, with the load and the device,
    and never as a speed comparison; runs that predate these fields say the context is not recorded."""
    t0 = 1_800_000_000.0
    when = {
        ("pre", 0): (t0, 100.0, 3.9),
        ("post", 0): (t0 + 10, 100.0, 4.2),
        ("pre", 1): (t0 + 200, 50.0, 1.1),
    }
    specs = [
        fab.spec(
            "ln",
            p,
            seed,
            final_val=3.0,
            best_val=3.0,
            final_train=3.0,
            tokens_per_s=8400.0 if p == "pre" else 12300.0,
            summary_extra={
                "started_at": start,
                "wall_time_s": wall,
                "load_avg": load,
                "device": "cpu (2 cores, 1 torch thread)",
            },
        )
        for (p, seed), (start, wall, load) in when.items()
    ]
    rs = load_runs(fab.write_sweep(tmp_path / "s", specs))
    text = write_report(rs, tmp_path / "r", figures=["loss"]).path.read_text()
    summary = text.split("## Summary")[1].split("## ")[0]
    assert (
        "tokens/s: as each run measured it, up to 2 of these runs training at the same time, 1-minute load "
        "average 1.1–4.2 when they ended, on cpu (2 cores, 1 torch thread)."
    ) in summary
    assert "not a speed comparison between variants" in summary and "scripts/bench_norm_op.py" in summary
    header = table_row(text, "run")
    assert header[-3:] == ["tokens/s", "trained beside", "load"]
    beside = {
        table_row(text, r)[1] + f" s{table_row(text, r)[2]}": table_row(text, r)[-2:] for r in rs.runs.index
    }
    assert beside == {"pre s0": ["1", "3.9"], "post s0": ["1", "4.2"], "pre s1": ["0", "1.1"]}
    # runs without the fields
    old = load_runs(fab.write_sweep(tmp_path / "o", [dict(s, summary_extra=None) for s in specs]))
    text = write_report(old, tmp_path / "r2", figures=["loss"]).path.read_text()
    assert "at what load is not recorded" in text and "not a speed comparison" in text
    assert table_row(text, rs.runs.index[0])[-2:] == ["–", "–"]
