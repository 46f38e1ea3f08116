"""The W&B dashboard of a sweep (normlab.analysis.dashboard): built offline from what the runs logged, every
panel naming a key the runs have — read here straight from their metrics.jsonl, summary.json and W&B's own
offline files — and the online save one call."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("wandb_workspaces")

from wandb_records import read_run  # noqa: E402

from normlab.analysis import load_runs, write_report  # noqa: E402
from normlab.analysis.dashboard import BAR, FIGURE_PREFIX, LINE, MEDIA, build, main  # noqa: E402
from normlab.train.run import Run  # noqa: E402


@pytest.fixture(scope="module")
def wandb_sweep(tmp_path_factory, cache_dir):
    """A two-job sweep (ln, pre vs post) trained for a few steps with W&B offline, and its report."""
    from tiny_run import SHORT

    from normlab.config.compose import compose_config

    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    sweep = tmp_path_factory.mktemp("sweeps") / "2026-11-26" / "10-00-00_demo"
    try:
        for num, placement in enumerate(("pre", "post")):
            cfg = compose_config(
                [
                    *SHORT,
                    "data=synthetic",
                    "data.n_train_stories=400",
                    "data.n_val_stories=40",
                    "data.vocab_size=512",
                    f"data.cache_dir={cache_dir}",
                    f"placement={placement}",
                    "logger=wandb",
                    "train.max_steps=8",
                    "train.eval_every=4",
                    "metrics.dense_until=3",
                ]
            )
            Run(cfg, sweep / f"{num}_ln-{placement}", group="2026-11-26_10-00-00_demo").execute()
    finally:
        mp.undo()
    import wandb

    wandb.teardown()  # every offline file written (tests/metrics/test_wandb.py says why)
    write_report(load_runs(sweep), sweep / "report", figures=["loss", "grad_norm", "act_rms"])
    return sweep


def jsonl_keys(sweep: Path) -> set[str]:
    keys: set[str] = set()
    for path in sweep.glob("*/metrics.jsonl"):
        for line in path.read_text().splitlines():
            keys |= {k for k, v in json.loads(line).items() if v is not None}
    return keys


def summary_numbers(sweep: Path) -> set[str]:
    keys: set[str] = set()
    for path in sweep.glob("*/summary.json"):
        summary = json.loads(path.read_text())
        keys |= {k for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return keys


def test_every_panel_names_a_key_the_runs_logged(wandb_sweep):
    dash = build(wandb_sweep)
    assert dash.group == "2026-11-26_10-00-00_demo" and dash.group_by == ["placement"]
    logged, summaries = jsonl_keys(wandb_sweep), summary_numbers(wandb_sweep)
    kinds = {p.kind for p in dash.panels()}
    assert {LINE, BAR, MEDIA} <= kinds
    history: set[str] = set()
    for path in wandb_sweep.glob("*/wandb/offline-run-*/run-*.wandb"):
        for row in read_run(path)["history"]:
            history |= set(row)
    for panel in dash.panels():
        if panel.kind == LINE:
            assert panel.keys and set(panel.keys) <= logged, panel
            assert set(panel.keys) <= history, panel  # what W&B itself holds for these runs
        elif panel.kind == BAR:
            assert panel.keys and set(panel.keys) <= summaries, panel
        elif panel.kind == MEDIA:
            assert {k.removeprefix(FIGURE_PREFIX) for k in panel.keys} == {"loss", "grad_norm", "act_rms"}
    titles = {p.title for p in dash.panels()}
    for wanted in (
        "Training loss",
        "Validation loss",
        "Per-block gradient norm (one line per block and variant)",
        "Residual-stream RMS after each block",
        "Model update since initialisation (DeepNet)",
    ):
        assert wanted in titles
    comparison = dash.sections[0].panels[0].text
    assert "post − pre" in comparison and "| key | contrast |" in comparison


def test_the_workspace_is_built_offline_and_saved_in_one_call(wandb_sweep, monkeypatch):
    import wandb_workspaces.workspaces as ws

    dash = build(wandb_sweep)
    workspace = dash.workspace()
    assert [s.name for s in workspace.sections] == [s.name for s in dash.sections]
    assert sum(len(s.panels) for s in workspace.sections) == len(dash.panels())
    saved = []
    monkeypatch.setattr(
        ws.Workspace, "save", lambda self: saved.append(self) or SimpleNamespace(url="https://w/x")
    )

    class FakeRun:
        def __init__(self):
            self.rows = []

        def log(self, row):
            self.rows.append(row)

        def finish(self):
            self.finished = True

    run = FakeRun()
    fake = SimpleNamespace(
        init=lambda **kw: run.__dict__.update(init=kw) or run,
        Image=lambda path: ("image", path),
        Table=lambda columns, data: ("table", columns, data),
    )
    assert dash.save(fake) == "https://w/x"
    assert len(saved) == 1 and run.init["job_type"] == "comparison" and run.init["group"] == dash.group
    (row,) = run.rows
    media = next(p for p in dash.panels() if p.kind == MEDIA)
    assert set(media.keys) <= set(row) and row[f"{FIGURE_PREFIX}effects"][0] == "table"


def test_the_command_line_builds_offline(wandb_sweep, tmp_path, capsys):
    assert main([str(wandb_sweep), "--spec", str(tmp_path / "spec.json")]) == 0
    out = capsys.readouterr().out
    assert "offline only: add --save" in out and "line     Training loss (loss)" in out
    spec = json.loads((tmp_path / "spec.json").read_text())
    assert spec["group"] == "2026-11-26_10-00-00_demo"
    assert main([str(tmp_path / "nothing")]) == 2


def test_a_sweep_logged_without_wandb_is_said_to_have_nothing_to_show(fab, tmp_path, capsys, monkeypatch):
    """The crafted runs were logged with logger=none: the layout is built (its keys are the runs'), with a
    warning that W&B holds none of them; --save refuses to upload an empty workspace."""
    sweep = fab.write_sweep(tmp_path / "sweep", fab.MAIN[:2])
    assert main([str(sweep)]) == 0
    err = capsys.readouterr().err
    assert "warning: none of the 2 runs logged to W&B (logger=none)" in err
    saved = []
    monkeypatch.setattr("normlab.analysis.dashboard.Dashboard.save", lambda self: saved.append(self))
    assert main([str(sweep), "--save"]) == 2
    assert "nothing was uploaded" in capsys.readouterr().err and not saved
