"""A finding may calibrate in several sweeps, one after the other (Calibration.then: DyT's α₀ chosen at the
learning rate the first sweep tuned): `scripts/reproduce.py --calibrate` runs each into a directory of its
own before the preset's sweep, timings.json keeps every command, and the report shows each sweep's arms."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path

from reproduce_crafted import Sweep

from normlab.study.findings import FINDINGS
from normlab.study.findings._finding import Calibration
from normlab.study.findings_report.section import calibration_tables
from normlab.study.preset_sweep import run_preset
from normlab.study.robustness import calibration_dir

TWO_SWEEPS = Calibration(
    seeds=(0,),
    overrides=("optim.lr=1e-3,3e-3", "seed=0"),
    arms="crafted",
    chosen="crafted",
    then=(("optim.lr=3e-3", "warmup_steps=0,30", "seed=0"),),
)


def recording_python(tmp_path: Path) -> Path:
    """A stand-in for `python -m normlab -m …` that appends its arguments to calls.jsonl and exits 0."""
    stub = tmp_path / "python"
    calls = tmp_path / "calls.jsonl"
    stub.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n"
    )
    stub.chmod(0o755)
    return stub


def test_each_calibration_sweep_runs_in_order_into_its_own_directory_before_the_preset(tmp_path, monkeypatch):
    import normlab.study.reproduce as reproduce

    finding = dataclasses.replace(FINDINGS["xiong_warmup"], calibration=TWO_SWEEPS)
    monkeypatch.setitem(FINDINGS, "xiong_warmup", finding)
    stub = recording_python(tmp_path)
    monkeypatch.setattr(reproduce, "run_preset", functools.partial(run_preset, python=str(stub)))
    out = tmp_path / "out"
    monkeypatch.setattr(reproduce, "build_report", lambda *a, **k: (out / "REPORT.md", {}))
    assert reproduce.main(["xiong_warmup", "--calibrate", "--no-perturb", "--out", str(out)]) == 0
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    dirs = [next(a.split("=", 1)[1] for a in argv if a.startswith("hydra.sweep.dir=")) for argv in calls]
    sweep = (out / "sweeps" / "xiong_warmup").resolve()
    assert dirs == [
        str(sweep.with_name("xiong_warmup.calibration")),
        str(sweep.with_name("xiong_warmup.calibration-2")),
        str(sweep),
    ]
    assert "optim.lr=1e-3,3e-3" in calls[0] and "warmup_steps=0,30" not in calls[0]
    assert "warmup_steps=0,30" in calls[1] and "optim.lr=3e-3" in calls[1]
    assert not any(a.startswith(("optim.lr=", "warmup_steps=")) for a in calls[2])  # the preset's own sweep
    record = json.loads((out / "timings.json").read_text())["findings"]["xiong_warmup"]
    assert "optim.lr=1e-3,3e-3" in record["calibration"]["command"]
    assert len(record["calibration"]["then"]) == 1 and "warmup_steps=0,30" in record["calibration"]["then"][0]


def test_the_report_shows_each_calibration_sweep_that_ran_under_its_overrides(tmp_path):
    sweeps = tmp_path / "sweeps"
    preset = sweeps / "xiong_warmup"
    first = Sweep(calibration_dir(preset, 0), "xiong_warmup")
    first.add({"optim.lr": 1e-3, "seed": 0}, final_val=3.5)
    first.add({"optim.lr": 3e-3, "seed": 0}, final_val=3.25)
    head_1, head_2 = "`optim.lr=1e-3,3e-3 seed=0`:", "`optim.lr=3e-3 warmup_steps=0,30 seed=0`:"
    one = calibration_tables(preset, TWO_SWEEPS)  # only the first ran
    assert one is not None and one.index(head_1) < one.index("3.5") and "3.25" in one and head_2 not in one
    second = Sweep(calibration_dir(preset, 1), "xiong_warmup")
    second.add({"optim.lr": 3e-3, "warmup_steps": 0, "seed": 0}, final_val=3.125)
    second.add({"optim.lr": 3e-3, "warmup_steps": 30, "seed": 0}, final_val=3.0625)
    both = calibration_tables(preset, TWO_SWEEPS)
    assert both is not None
    assert both.index(head_1) < both.index("3.25") < both.index(head_2) < both.index("3.062")
    assert calibration_tables(preset, None) is None
    single = dataclasses.replace(TWO_SWEEPS, then=())
    alone = calibration_tables(preset, single)  # a finding with one calibration sweep: its table, no heading
    assert alone is not None and "`" not in alone and "3.25" in alone and "3.062" not in alone
