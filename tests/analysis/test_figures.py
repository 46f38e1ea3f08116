"""What the figures show, checked on their matplotlib artists (lines, markers, patches, axes, ticks) for
crafted runs with known values: every variant tellable apart, identical curves named, n in the legend,
bands only where n ≥ 2, integer step ticks ending at the true last step, spike markers and the shaded
steps before the spike detector watches, and own y scales where ranges differ by more than 10×."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from normlab.analysis import load_runs
from normlab.analysis.plots import (
    FIGURES,
    coinciding,
    layer_contributions,
    plot_act_rms,
    plot_attn_max_logit,
    plot_grad_norm,
    plot_grad_profile_init,
    plot_grid,
    plot_layer_ablation,
    plot_loss,
    step_ticks,
)


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def data_lines(ax) -> list:
    """Plotted curves (not the clip threshold's horizontal line)."""
    return [line for line in ax.get_lines() if len(line.get_xdata()) > 1 and len(set(line.get_ydata())) > 1]


def dashes(line) -> tuple:
    """The drawn dash pattern (get_linestyle() says only '--' for every custom pattern)."""
    offset, pattern = line._unscaled_dash_pattern
    return (offset, tuple(pattern) if pattern else None)


def style_of(line) -> tuple:
    return (dashes(line), line.get_marker(), to_rgba(line.get_color()))


@pytest.fixture(scope="module")
def six(fab, tmp_path_factory):
    """ln / rms / none × pre / post like the demo; the two `none` variants are the same network (identical
    values), ln-pre and rms-pre nearly coincide (bases 1.0 and 1.001). Two seeds each except rms-post (1)."""
    specs = []
    bases = {("ln", "pre"): 1.0, ("rms", "pre"): 1.001, ("ln", "post"): 1.2, ("rms", "post"): 1.3}
    for norm in ("ln", "rms", "none"):
        for placement in ("pre", "post"):
            seeds = (0,) if (norm, placement) == ("rms", "post") else (0, 1)
            for seed in seeds:
                base = bases.get((norm, placement), 1.5) + 0.01 * seed
                specs.append(
                    fab.spec(
                        norm,
                        placement,
                        seed,
                        final_val=2.0 + base,
                        best_val=2.0 + base,
                        final_train=2.0 + base,
                        base=base,
                        spikes=(2, 11) if norm == "rms" else (),
                        attn_scale=60.0 if norm == "none" else 1.0,
                        summary_extra={"spike_watch_start": 6},
                    )
                )
    return load_runs(fab.write_sweep(tmp_path_factory.mktemp("six") / "sweep", specs))


def test_every_variant_has_its_own_line_style_and_marker(six):
    fig = plot_loss(six, smooth=1)
    ax_train = fig.axes[0]
    lines = data_lines(ax_train)
    assert len(lines) == 6  # one mean line per variant, none hidden behind another
    assert len({style_of(line) for line in lines}) == 6
    assert len({dashes(line) for line in lines}) == 6 and len({line.get_marker() for line in lines}) == 6
    # markers of a long curve are staggered: the two identical `none` curves put theirs at different steps
    none_lines = [
        line
        for line in lines
        if to_rgba(line.get_color()) in {to_rgba(six.colors[v]) for v in ("none, pre", "none, post")}
    ]
    marked = [
        set(np.asarray(line.get_xdata())[line.get_markevery()[0] :: line.get_markevery()[1]])
        for line in none_lines
    ]
    assert marked[0] and marked[1] and not marked[0] & marked[1]


def test_legend_gives_n_and_names_identical_curves(six):
    for fig in (plot_loss(six), plot_grad_norm(six), plot_grad_profile_init(six), plot_act_rms(six)):
        texts = legend_texts(fig)
        assert "ln, pre  (n=2)" in texts and "rms, post  (n=1)" in texts
        notes = [t for t in texts if t.startswith("identical curves")]
        assert len(notes) == 1, texts
        assert "none, pre = none, post" in notes[0].replace("\n", " ")
        assert "same network" in notes[0].replace("\n", " ")  # the reason: norm=none in every slot
        # ln-pre and rms-pre nearly coincide but are not identical: not named
        assert "rms, pre" not in notes[0]


def test_identical_means_identical(fab):
    x = np.arange(5.0)
    y = np.linspace(3, 2, 5)
    groups = coinciding({"a": (x, y), "b": (x, y.copy()), "c": (x, y * (1 + 1e-3)), "d": (x, y)})
    assert groups == [["a", "b", "d"]]
    assert coinciding({"a": (x, y), "b": (x[:4], y[:4])}) == []


def test_bands_only_where_a_variant_has_two_runs(six):
    fig = plot_loss(six, smooth=1)
    fills = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    fill_colors = {tuple(np.round(c.get_facecolor()[0][:3], 4)) for c in fills}

    def rgb(v):
        return tuple(np.round(to_rgba(six.colors[v])[:3], 4))

    assert rgb("ln, pre") in fill_colors and rgb("none, post") in fill_colors
    assert rgb("rms, post") not in fill_colors  # n = 1: no band
    assert "band ± 1 std where n ≥ 2" in fig.get_suptitle()


def test_step_axes_have_integer_ticks_ending_at_the_last_step(six, fab):
    fig = plot_loss(six)
    for ax in fig.axes[:2]:
        ticks = ax.get_xticks()
        assert np.all(ticks == np.round(ticks)) and ticks[0] == 0
        assert ticks[-1] == fab.MAX_STEPS  # the final evaluation's step, not the last logged training row
        assert ax.get_xlim() == (0, fab.MAX_STEPS)
    assert step_ticks(300)[-1] == 300 and step_ticks(7) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert step_ticks(298)[-2] < 298 - 0.08 * 298  # a round tick too close to the end makes way for it
    assert all(float(t).is_integer() for t in step_ticks(13))


def test_spikes_are_marked_and_unwatched_steps_shaded(six, fab):
    fig = plot_loss(six, smooth=1)
    ax = fig.axes[0]
    # rms variants: spikes at steps 2 and 11 in every run → hollow triangles at those steps
    triangles = [c for c in ax.collections if isinstance(c, PathCollection)]
    steps = sorted({float(c.get_offsets()[0][0]) for c in triangles})
    assert steps == [2.0, 11.0]
    # summary.json's spike_watch_start (6) shades [0, 6)
    (span,) = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0]
    assert (span.get_x(), span.get_x() + span.get_width()) == (0, 6)
    assert any("not yet watching (steps < 6)" in t.replace("\n", " ") for t in legend_texts(fig))


def test_watch_start_falls_back_to_the_spike_window(sweep, fab):
    """Runs whose summary.json predates spike_watch_start: the detector tested from spikes.window on."""
    rs = load_runs(sweep.path)
    assert set(rs.valid["spike_watch_start"]) == {fab.SPIKE_WINDOW}
    fig = plot_grad_norm(rs)
    (span,) = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_width() > 0]
    assert span.get_width() == fab.SPIKE_WINDOW


def test_panels_get_their_own_y_scale_when_ranges_differ_tenfold(six, sweep):
    fig = plot_attn_max_logit(six)  # none variants: 60× larger logits
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    tops = {ax.get_title().split("\n")[0]: ax.get_ylim()[1] for ax in panels}
    assert tops["ln, pre  (n=2)"] < 20 < tops["none, pre  (n=2)"]  # the normalised runs are not flattened
    assert "own y scale per panel" in fig.get_suptitle()
    assert (
        "= none, pre (identical)"
        in [ax for ax in panels if ax.get_title().startswith("none, post")][0].get_title()
    )
    same = plot_attn_max_logit(load_runs(sweep.path))  # similar ranges: one shared scale
    tops = {ax.get_ylim() for ax in same.axes if ax.get_visible() and ax.get_title()}
    assert len(tops) == 1 and "own y scale" not in same.get_suptitle()


def test_one_run_per_variant_says_so(fab, tmp_path):
    specs = [fab.spec("ln", p, 0, final_val=3.0, best_val=3.0, final_train=3.0) for p in ("pre", "post")]
    rs = load_runs(fab.write_sweep(tmp_path / "s", specs))
    fig = plot_loss(rs)
    assert not [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert "n=1: no bands" in fig.get_suptitle()


def test_grid_cells_show_n(grid_sweep):
    rs = load_runs(grid_sweep.path)
    fig = plot_grid(rs, "depth", "warmup_steps")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "3.100\n± 0.141\nn=2" in texts
    assert "2.600\n1/2 div." in texts


def test_layer_ablation_figure_shows_each_runs_loss_increase_per_block(six, fab):
    per_run = layer_contributions(six)
    assert len(per_run) == 11  # every completed run of the six variants
    for run, deltas in per_run.items():
        base = six.runs.at[run, "final_val_loss"] - 2.0
        expected = [fab.layer_importance({"base": base}, i) for i in range(fab.DEPTH)]
        np.testing.assert_allclose(deltas, expected, rtol=1e-9)
    fig = plot_layer_ablation(six)
    ax = fig.axes[0]
    pre = six.runs.index[(six.runs["norm"] == "ln") & (six.runs["placement"] == "pre")]
    mean = np.mean([per_run[r] for r in pre], axis=0)
    lines = [
        ln for ln in ax.get_lines() if len(ln.get_ydata()) == len(mean) and np.allclose(ln.get_ydata(), mean)
    ]
    assert len(lines) == 1 and list(lines[0].get_xdata()) == list(range(fab.DEPTH))


def test_every_report_figure_is_exported_by_its_name_from_the_one_list():
    """FIGURES is the one list of figure functions: each is `normlab.analysis.NAME` and
    `normlab.analysis.plots.NAME`, in __all__ and dir() of both, and __all__ names nothing that is not there."""
    import normlab.analysis as analysis
    from normlab.analysis import plots

    assert len(FIGURES) >= 9
    for module in (analysis, plots):
        for spec in FIGURES:
            name = spec.draw.__name__
            assert name.startswith("plot_")
            assert getattr(module, name) is spec.draw, (module.__name__, name)
            assert name in module.__all__ and name in dir(module), (module.__name__, name)
        assert all(hasattr(module, name) for name in module.__all__), module.__name__
        assert len(set(module.__all__)) == len(module.__all__), module.__name__
    namespace: dict = {}
    exec("from normlab.analysis import *", namespace)
    assert namespace["plot_layer_ablation"] is plot_layer_ablation and namespace["plot_loss"] is plot_loss
