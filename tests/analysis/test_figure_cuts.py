"""Figures never clip silently: on crafted runs, a loss spike far above every other curve gets a cut y axis
that is marked (break marks, a ▲ on the top edge at the spike) and a legend note naming the run's variant,
its peak, the step and how far above the cut it is — decoded from the figure's artists and compared with the
crafted value; every figure's drawn data lies inside its axes or is named by a cut note; a heatmap's colour
scale is cut only when a few cells would flatten the rest, and says by how much; every text fits the figure."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, PolyCollection, QuadMesh
from matplotlib.colors import to_rgba

from normlab.analysis import load_runs
from normlab.analysis.plots import FIGURES, NoData, plot_grid, plot_loss
from normlab.analysis.plots.cuts import CUT_GID, colour_cut_note, log_colour_scale

SPIKE_STEP, SPIKE_LOSS = 8, 50.0  # the crafted runs start near 6 nats: the spike is 8× their start


def legend_texts(fig) -> list[str]:
    return [t.get_text().replace("\n", " ") for legend in fig.legends for t in legend.get_texts()]


@pytest.fixture(scope="module")
def spiky(fab, tmp_path_factory):
    """ln (2 seeds) and none (1 seed), both pre, whose loss jumps to SPIKE_LOSS at SPIKE_STEP, flagged."""
    specs = [
        fab.spec("ln", "pre", s, final_val=2.5, best_val=2.5, final_train=2.5, base=1.0 + 0.01 * s)
        for s in (0, 1)
    ]
    specs.append(
        fab.spec(
            "none",
            "pre",
            0,
            final_val=3.0,
            best_val=3.0,
            final_train=3.0,
            base=1.02,
            spikes=(SPIKE_STEP,),
            loss_at={SPIKE_STEP: SPIKE_LOSS},
        )
    )
    return load_runs(fab.write_sweep(tmp_path_factory.mktemp("spiky") / "sweep", specs))


def test_a_spike_beyond_the_cut_is_marked_and_named(spiky, fab):
    fig = plot_loss(spiky, smooth=1)
    ax = fig.axes[0]
    top = ax.get_ylim()[1]
    start = 6.0 * 1.02  # the largest first-step loss of the crafted runs (train_loss at step 0)
    assert top < SPIKE_LOSS and top == pytest.approx(1.25 * start, rel=0.1)  # the other curves stay readable
    # the note: variant, peak, its step, how far above the cut, the steps beyond it
    (note,) = [t for t in legend_texts(fig) if "axis cut at" in t]
    m = re.search(
        r"training-loss axis cut at ([\d.]+) .*: (.+?) up to ([\d.]+) at step (\d+), ([\d.]+) above", note
    )
    assert m, note
    cut, who, peak, step, above = float(m[1]), m[2], float(m[3]), int(m[4]), float(m[5])
    assert cut == pytest.approx(top, abs=0.01) and who == "none"
    assert (peak, step) == (SPIKE_LOSS, SPIKE_STEP)
    assert above == pytest.approx(SPIKE_LOSS - top, abs=0.01)
    assert f"beyond it at step {SPIKE_STEP})" in note
    # on the axis: a ▲ on the top edge at the spike's step, in the variant's colour, labelled with its value
    (marker,) = [ln for ln in ax.get_lines() if ln.get_gid() == CUT_GID]
    assert (marker.get_xdata()[0], marker.get_ydata()[0]) == (SPIKE_STEP, top)
    assert to_rgba(marker.get_color()) == to_rgba(spiky.colors["none"])
    labels = [t.get_text() for t in ax.texts if t.get_gid() == CUT_GID]
    assert labels == [f"↑{SPIKE_LOSS:.2f}"]
    # the spike's ▲ marker sits on the edge, not off the axes
    spikes = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert [tuple(c.get_offsets()[0]) for c in spikes] == [(SPIKE_STEP, top)]
    # the validation panel holds every value: no cut there
    assert not any("validation-loss axis cut" in t for t in legend_texts(fig))


def test_no_cut_without_an_outlier(fab, tmp_path):
    specs = [fab.spec("ln", p, 0, final_val=3.0, best_val=3.0, final_train=3.0) for p in ("pre", "post")]
    fig = plot_loss(load_runs(fab.write_sweep(tmp_path / "s", specs)), smooth=1)
    assert not any("cut" in t for t in legend_texts(fig))
    lo, hi = fig.axes[0].get_ylim()
    assert lo < 6.0 - 0.1 * (fab.MAX_STEPS - 1) and hi > 6.0  # every crafted value inside


def outside(ax) -> list[str]:
    """What an Axes draws outside its view limits (lines, bands, markers in data coordinates)."""
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    tol_y, tol_x = 1e-9 * max(abs(y0), abs(y1), 1), 1e-9 * max(abs(x1), 1)
    found = []
    chunks = []
    for line in ax.get_lines():
        if line.get_transform() == ax.transData and line.get_gid() != CUT_GID:
            chunks.append((f"line {line.get_label()}", np.column_stack([line.get_xdata(), line.get_ydata()])))
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            chunks.append(("marker", np.asarray(coll.get_offsets(), dtype=float)))
        elif isinstance(coll, PolyCollection):
            for path in coll.get_paths():
                chunks.append(("band", path.vertices))
    for what, xy in chunks:
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) == 0:
            continue
        if (xy[:, 1] > y1 + tol_y).any() or (xy[:, 1] < y0 - tol_y).any():
            found.append(f"{what}: y {xy[:, 1].min():g}..{xy[:, 1].max():g} outside {y0:g}..{y1:g}")
        if (xy[:, 0] > x1 + tol_x).any() or (xy[:, 0] < x0 - tol_x).any():
            found.append(f"{what}: x outside {x0:g}..{x1:g}")
    return found


def every_figure(rs):
    for spec in FIGURES:
        try:
            yield spec.key, spec.draw(rs)
        except NoData:
            continue
    yield "grid", plot_grid(rs, *rs.group_keys[:2]) if len(rs.group_keys) >= 2 else None


@pytest.mark.parametrize("which", ["spiky", "sweep", "grid_sweep"])
def test_no_figure_clips_silently(which, request):
    fixture = request.getfixturevalue(which)
    rs = fixture if which == "spiky" else load_runs(fixture.path)
    for key, fig in every_figure(rs):
        if fig is None:
            continue
        notes = " ".join(legend_texts(fig)) + fig.get_suptitle()
        for ax in fig.axes:
            if not ax.get_visible() or ax.get_label() == "<colorbar>":
                continue
            lost = outside(ax)
            assert not lost or "axis cut at" in notes, (key, lost)
        for mesh in [c for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)]:
            values = np.ma.compressed(mesh.get_array())
            beyond = (values > mesh.norm.vmax * (1 + 1e-9)) | (values < mesh.norm.vmin * (1 - 1e-9))
            assert not beyond.any() or "colour scale cut" in notes, key


@pytest.mark.slow
@pytest.mark.parametrize("which", ["spiky", "six_long", "grid_sweep"])
def test_every_text_fits_inside_the_figure(which, request, fab, tmp_path):
    if which == "six_long":  # long variant names: titles and legends must still fit
        specs = [
            fab.spec("ln", p, 0, final_val=3.0, best_val=3.0, final_train=3.0, depth=d)
            for p in ("pre", "post")
            for d in (2, 12)
        ]
        rs = load_runs(fab.write_sweep(tmp_path / "s", specs))
    else:
        fixture = request.getfixturevalue(which)
        rs = fixture if which == "spiky" else load_runs(fixture.path)
    for key, fig in every_figure(rs):
        if fig is None:
            continue
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        box = fig.bbox
        # what is drawn: each Axes with its tick labels, titles and notes; legends; the figure's title
        parts = [
            (f"axes {ax.get_title()!r}", ax.get_tightbbox(renderer)) for ax in fig.axes if ax.get_visible()
        ]
        parts += [("legend", legend.get_window_extent(renderer)) for legend in fig.legends]
        parts += [(fig.get_suptitle(), fig._suptitle.get_window_extent(renderer))] if fig._suptitle else []
        for what, ext in parts:
            inside = (
                ext.x0 >= box.x0 - 1
                and ext.x1 <= box.x1 + 1
                and ext.y0 >= box.y0 - 1
                and ext.y1 <= box.y1 + 1
            )
            assert inside, (key, what, ext.bounds, box.bounds)


def test_grid_subtitle_fits_a_narrow_grid(grid_sweep):
    """The issue's case: a 2 × 2 grid is narrower than its two-line subtitle."""
    fig = plot_grid(load_runs(grid_sweep.path), "depth", "warmup_steps")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    title = fig._suptitle
    ext = title.get_window_extent(renderer)
    assert fig.bbox.x0 <= ext.x0 and ext.x1 <= fig.bbox.x1
    words = "mean ± std over a cell's runs (n in the cell); red hatching: a run diverged; grey: no value"
    assert " ".join(title.get_text().split()).endswith(words)  # all of it, only rewrapped


def frame(values: np.ndarray, first_step: int = 0) -> pd.DataFrame:
    return pd.DataFrame(values, index=np.arange(first_step, first_step + len(values)))


def test_colour_scale_spans_everything_unless_a_few_cells_would_flatten_it():
    rng = np.random.default_rng(0)
    calm = {v: frame(rng.uniform(0.05, 0.5, size=(300, 6))) for v in ("ln, pre", "ln, post")}
    scale = log_colour_scale(calm)
    every = np.concatenate([m.to_numpy().ravel() for m in calm.values()])
    assert (scale.vmin, scale.vmax) == (every.min(), every.max()) and scale.extend == "neither"
    assert colour_cut_note(scale) == ""

    burst = frame(rng.uniform(0.05, 0.5, size=(300, 6)))
    burst.iloc[30, :] = 700.0  # one step of six blocks, 1400× the rest: 6 of 3600 cells
    scale = log_colour_scale({**calm, "none, pre": burst})
    assert scale.vmax < 1.0 and scale.extend == "max"
    ((variant, peak, step, n),) = scale.above
    assert (variant, peak, step, n) == ("none, pre", 700.0, 30, 6)
    note = colour_cut_note(scale)
    assert "none, pre (6 cells, up to 700 at step 30" in note
    assert f"{700.0 / scale.vmax:.3g}× beyond" in note
