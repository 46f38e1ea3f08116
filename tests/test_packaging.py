"""`pip install .` without a checkout: the wheel carries the configs, the sweep launchers' Hydra plugin and the
normlab-train command."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from normlab.model import NORMS
from normlab.model.norms import RECIPES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_configs_data_and_entry_point(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            str(ROOT),
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("normlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removeprefix("normlab/configs/") for n in names if n.startswith("normlab/configs/")}
    in_checkout = {
        p.relative_to(ROOT / "src/normlab/configs").as_posix()
        for p in (ROOT / "src/normlab/configs").rglob("*.yaml")
    }
    assert in_checkout <= shipped, in_checkout - shipped
    assert "normlab/data/synthetic_words.json" in names  # the embedded corpus's word tables
    # Hydra builds launchers only from its plugin namespace: normlab's sweep launchers ship there
    assert "hydra_plugins/normlab_launchers/__init__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "normlab-train = normlab.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_python_dash_m_normlab_is_train_py(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "normlab", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "== Config groups" in done.stdout and f"norm: {', '.join(sorted([*NORMS, *RECIPES]))}" in done.stdout
    )
