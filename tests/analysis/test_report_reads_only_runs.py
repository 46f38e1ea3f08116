"""A report reads nothing outside its runs, and a run it cannot read never sinks it (issue 39, points 1, 2 and
6; issue 40, point 2): compare.py reads only the regular files inside each run directory (no symbolic link
leads out, a FIFO never blocks it), lists a run it cannot read with the reason while reporting the others,
survives a config value of the wrong type, flags a step with two rows, and writes the report of a sweep
stopped before any evaluation — or before any job wrote anything — naming the runs unfinished or missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from normlab.analysis import load_runs, write_report
from normlab.analysis.escape import md_text

ROOT = Path(__file__).resolve().parents[2]
PASSWD = "root:x:0:0:the-secret-line-of-this-machine:/root:/bin/bash"
NETRC = "machine example.org login me password hunter2-netrc-password"


def compare(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def runs_of(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if p.is_dir())


def everything_written(out: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".md", ".html", ".csv")
    )


def test_no_symbolic_link_leads_out_of_a_run(fresh_sweep, tmp_path):
    """The issue's probe: .hydra/config.yaml → /etc/passwd put the whole file into report.md, report.html
    and runs.csv; a relative link to a netrc put its password into report.html."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text(PASSWD + "\n")
    (outside / "netrc").write_text(NETRC + "\n")
    runs = runs_of(fresh_sweep.path)
    config = runs[0] / ".hydra" / "config.yaml"
    config.unlink()
    config.symlink_to(outside / "passwd")
    summary = runs[1] / "summary.json"
    summary.unlink()
    summary.symlink_to(os.path.relpath(outside / "netrc", summary.parent))
    # a link to a whole directory: .hydra/ of a third run
    hydra = runs[2] / ".hydra"
    (outside / "hydra").mkdir()
    (outside / "hydra" / "config.yaml").write_text(f"experiment_name: '{PASSWD}'\n")
    for p in hydra.iterdir():
        p.unlink()
    hydra.rmdir()
    hydra.symlink_to(outside / "hydra")
    out = tmp_path / "report"
    proc = compare(str(fresh_sweep.path), "--group-by", "run", "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    written = everything_written(out) + proc.stdout + proc.stderr
    assert "the-secret-line" not in written and "hunter2" not in written
    markdown = (out / "report.md").read_text()
    for run, name in ((runs[0], ".hydra/config.yaml"), (runs[1], "summary.json"), (runs[2], ".hydra")):
        assert f"{md_text(run.name)}: {name} is a symbolic link, not followed" in markdown
    assert len(load_runs(fresh_sweep.path).runs) == len(
        runs
    )  # every run still reported, from what is its own


def test_a_fifo_or_a_linked_run_directory_is_named_not_read(fresh_sweep, tmp_path):
    """A metrics.jsonl that is a FIFO would block a reader for ever; a run directory that is a link leads
    out of the sweep: both are named, neither is read, and the others are reported."""
    runs = runs_of(fresh_sweep.path)
    metrics = runs[0] / "metrics.jsonl"
    metrics.unlink()
    os.mkfifo(metrics)
    elsewhere = tmp_path / "elsewhere-run"
    (elsewhere / ".hydra").mkdir(parents=True)
    (elsewhere / ".hydra" / "config.yaml").write_text(f"experiment_name: '{PASSWD}'\n")
    (fresh_sweep.path / "9_linked").symlink_to(elsewhere)
    out = tmp_path / "report"
    proc = compare(str(fresh_sweep.path), "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    markdown = (out / "report.md").read_text()
    assert "metrics.jsonl is not a regular file" in markdown
    assert "could not be read and are left out of every number and figure" in markdown
    assert (
        "9\\_linked is a symbolic link, not followed" in markdown or "9_linked is a symbolic link" in markdown
    )
    assert "the-secret-line" not in everything_written(out)


def test_a_run_with_nothing_readable_is_listed_with_the_reason_and_the_others_reported(fresh_sweep, tmp_path):
    runs = runs_of(fresh_sweep.path)
    target = tmp_path / "elsewhere.txt"
    target.write_text(PASSWD)
    for name in ("summary.json", "metrics.jsonl", ".hydra/config.yaml"):
        (runs[3] / name).unlink()
        (runs[3] / name).symlink_to(target)
    rs = load_runs(fresh_sweep.path)
    assert [run for run, _ in rs.unreadable] == [runs[3].name]
    assert len(rs.runs) == len(runs) - 1
    report = write_report(rs, tmp_path / "report")
    read_first = report.path.read_text().split("## Summary")[0]
    assert "1 run(s) could not be read" in read_first and md_text(runs[3].name) in read_first
    assert "the-secret-line" not in everything_written(tmp_path / "report")


def test_one_run_with_a_config_value_of_the_wrong_type_does_not_sink_the_report(
    fresh_sweep, tmp_path, monkeypatch
):
    """`seed: abc` (or `${oc.env:SECRET}`) in one run: on main "error: could not convert string to float:
    'abc'", exit 2, no report."""
    monkeypatch.setenv("NORMLAB_TEST_SECRET", "hunter2-environment")
    runs = runs_of(fresh_sweep.path)
    for run, seed in ((runs[0], "abc"), (runs[2], "${oc.env:NORMLAB_TEST_SECRET}")):
        path = run / ".hydra" / "config.yaml"
        config = yaml.safe_load(path.read_text())
        config["seed"] = seed
        config["warmup_steps"] = "many"
        path.write_text(yaml.safe_dump(config))
    out = tmp_path / "report"
    proc = compare(str(fresh_sweep.path), "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "hunter2" not in everything_written(out) + proc.stdout
    assert "${oc.env:NORMLAB_TEST_SECRET}" in (out / "report.md").read_text()  # as written
    assert len(load_runs(fresh_sweep.path).runs) == len(runs)


def test_a_step_with_two_rows_is_flagged(fresh_sweep, tmp_path):
    run = runs_of(fresh_sweep.path)[0]
    path = run / "metrics.jsonl"
    row = next(line for line in path.read_text().splitlines() if json.loads(line)["step"] == 7)
    with path.open("a") as f:
        f.write(row + "\n")
    rs = load_runs(fresh_sweep.path)
    assert rs.runs.loc[run.name, "rows_repeated"] == 1
    assert any("2 training rows for step 7" in w for w in rs.warnings)
    read_first = write_report(rs, tmp_path / "report").path.read_text().split("## Summary")[0]
    assert "more than one training row for a step" in read_first and md_text(run.name) in read_first


# ----------------------------------------------------------------------------------------------------
# issue 40, point 2: a stopped or partly started sweep
# ----------------------------------------------------------------------------------------------------


def stopped(sweep: Path, jobs: list[list[str]]) -> None:
    """The sweep as a Ctrl-C before any evaluation leaves it: each run interrupted with its training rows
    only (no val_loss yet), and the sweep's record of every job it was to run."""
    (sweep / ".sweep_progress.json").write_text(
        json.dumps({"total": len(jobs), "started": 0.0, "jobs": jobs})
    )
    for run in runs_of(sweep):
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={run.name[-1]}", "x=1"]))
        path = run / "metrics.jsonl"
        kept = [line for line in path.read_text().splitlines() if "val_loss" not in line]
        path.write_text("\n".join(kept[:4]) + "\n")
        summary = json.loads((run / "summary.json").read_text())
        summary.update(status="interrupted", steps=4, final_val_loss=None, best_val_loss=None)
        (run / "summary.json").write_text(json.dumps(summary))


def test_a_sweep_stopped_before_any_evaluation_gets_its_report(tmp_path, fab):
    """On main: error: No objects to concatenate, exit 2, and an empty report/ folder left behind."""
    specs = [fab.spec("ln", "pre", s, final_val=3.0, best_val=3.0, final_train=3.0) for s in (0, 1)]
    sweep = fab.write_sweep(tmp_path / "sweep", specs)
    stopped(sweep, [["seed=0", "x=1"], ["seed=1", "x=1"], ["seed=2", "x=1"], ["seed=3", "x=1"]])
    proc = compare(str(sweep))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    markdown = (sweep / "report" / "report.md").read_text()
    read_first = markdown.split("## Summary")[0]
    assert "2 of the 4 jobs of the sweep in" in read_first and "seed=2; seed=3" in read_first
    assert "2 run(s) have not finished" in read_first and "interrupted at step 4 of 20" in read_first
    assert (sweep / "report" / "loss.png").is_file()


def test_a_sweep_that_has_not_written_a_run_yet_gets_a_report_that_says_so(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    jobs = [["norm=ln", "seed=0"], ["norm=rms", "seed=0"]]
    (sweep / ".sweep_progress.json").write_text(json.dumps({"total": 2, "started": 0.0, "jobs": jobs}))
    proc = compare(str(sweep))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    markdown = (sweep / "report" / "report.md").read_text()
    assert "2 of the 2 jobs of the sweep in" in markdown and "norm=ln; norm=rms" in markdown
    assert (sweep / "report" / "report.html").is_file()


def test_a_report_that_cannot_be_written_leaves_no_folder(fresh_sweep, tmp_path):
    """On main a report that failed half-way (here an unknown --grid key; there, No objects to concatenate)
    left an empty report/ folder behind."""
    proc = compare(str(fresh_sweep.path), "--grid", "nosuchkey,depth")
    assert proc.returncode == 2 and "no config key 'nosuchkey'" in proc.stderr, proc.stderr
    assert not (fresh_sweep.path / "report").exists()
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    proc = compare(str(empty))
    assert proc.returncode == 2 and proc.stderr.startswith("error: no run directories")
    assert not (empty / "report").exists()
