"""Fixtures of the lifecycle tests: train.py run in this process, and one finished run to resume from."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_run import TRAIN, CliRun, base_overrides

from normlab.config.compose import compose_config


@pytest.fixture
def train_cli(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], cache_dir: Path, tmp_path: Path
) -> Callable[..., CliRun]:
    """`train_cli(*overrides, run_dir=None, cache=None)` runs train.py's __main__ with the tiny settings."""

    def run(*overrides: str, run_dir: Path | None = None, cache: Path | None = None) -> CliRun:
        run_dir = run_dir or tmp_path / "run"
        flags = [o for o in overrides if o.startswith("-")]  # -m and friends come before the overrides
        settings = [o for o in overrides if not o.startswith("-")]
        args = [*flags, *base_overrides(settings, cache or cache_dir), f"hydra.run.dir={run_dir}", *settings]
        monkeypatch.setattr(sys, "argv", [str(TRAIN), *args])
        capfd.readouterr()
        try:
            runpy.run_path(str(TRAIN), run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capfd.readouterr()
        return CliRun(code, out + err, run_dir)

    return run


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """A finished 3-step run (depth 2) with checkpoints/step_000002.pt and checkpoints/last.pt (step 3)."""
    from normlab.train.run import Run

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    overrides = [*base_overrides([], cache_dir), "train.ckpt_every=2"]
    cfg = compose_config(overrides)
    summary = Run(cfg, run_dir).execute()
    assert summary["status"] == "completed", summary
    return run_dir
