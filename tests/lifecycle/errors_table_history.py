"""The cases of docs/errors.md's rows about one history per run directory, damaged checkpoint data, refusals
that write nothing and the moments after a run ended (issue 39): each sets its fault up, runs train.py and
returns the result and what its sentence must name. test_errors_table.py adds them to its CASES."""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from cli_run import CliRun
from soak.faults import damage_tensor_data

CASES: dict[str, Callable[..., tuple[CliRun, str]]] = {}


def case(what: str) -> Callable:
    def register(fn: Callable) -> Callable:
        CASES[what] = fn
        return fn

    return register


def copy_run(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".run.lock")))


def files_of(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".run.lock"}


def as_interrupted(run: Path) -> Path:
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    return run


def training_steps(result: CliRun) -> list[int]:
    return [r["step"] for r in result.rows() if "loss" in r]


@case("a rewind: `train.resume=DIR/checkpoints/step_N.pt hydra.run.dir=DIR` with newer checkpoints in DIR")
def _rewind(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "run")
    result = train_cli(f"train.resume={run / 'checkpoints' / 'step_000002.pt'}", run_dir=run)
    (retired,) = (run / "checkpoints" / "retired").iterdir()
    assert [p.name for p in retired.iterdir()] == ["last.pt"]  # step 3's, of the history it left
    assert training_steps(result) == [0, 1, 2]
    return result, "retired"


@case(
    "`train.resume=FILE hydra.run.dir=DIR` where FILE, a checkpoint in DIR, belongs to another history than "
    "DIR's `metrics.jsonl`"
)
def _other_history(train_cli, trained_run, tmp_path, monkeypatch):
    run = as_interrupted(copy_run(trained_run, tmp_path / "run"))
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:  # the rows of another history: step 1's loss differs from what step_000002.pt followed
        if row["step"] == 1 and "loss" in row:
            row["loss"] += 0.5
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = files_of(run)
    result = train_cli(f"train.resume={run / 'checkpoints' / 'step_000002.pt'}", run_dir=run)
    assert files_of(run) == before
    return result, "train.resume=auto"


@case("`train.resume=auto` where `checkpoints/last.pt`'s tensor data is damaged (its zip index whole)")
def _auto_damaged_data(train_cli, trained_run, tmp_path, monkeypatch):
    run = as_interrupted(copy_run(trained_run, tmp_path / "run"))
    assert damage_tensor_data(run / "checkpoints" / "last.pt")
    result = train_cli("train.resume=auto", "train.max_steps=4", run_dir=run)
    assert training_steps(result) == [0, 1, 2, 3]
    return result, "last.pt"


@case("`train.resume=FILE` where FILE's tensor data is damaged (its zip index whole)")
def _file_damaged_data(train_cli, trained_run, tmp_path, monkeypatch):
    damaged = tmp_path / "damaged.pt"
    shutil.copy(trained_run / "checkpoints" / "last.pt", damaged)
    assert damage_tensor_data(damaged)
    before = damaged.read_bytes()
    result = train_cli(f"train.resume={damaged}")
    assert damaged.read_bytes() == before
    return result, "train.resume"


@case("a row repeated in `metrics.jsonl` (a copy appended), then `train.resume=auto`")
def _repeated_row(train_cli, trained_run, tmp_path, monkeypatch):
    run = as_interrupted(copy_run(trained_run, tmp_path / "run"))
    path = run / "metrics.jsonl"
    row = next(line for line in path.read_text().splitlines() if '"step": 1,' in line and '"loss"' in line)
    path.write_text(path.read_text() + row + "\n")
    result = train_cli("train.resume=auto", "train.max_steps=4", run_dir=run)
    assert training_steps(result) == [0, 1, 2, 3]
    return result, "metrics.jsonl"


@case("`train.resume=auto` on a finished run, with a lower `train.max_steps` and another `experiment_name`")
def _skipped(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "run")
    before = files_of(run)
    result = train_cli("train.resume=auto", "train.max_steps=2", "experiment_name=renamed", run_dir=run)
    assert files_of(run) == before  # no .hydra/ of this command, no line appended to train.log
    return result, "skipped"


@case("resuming a `data=text` run whose corpus files changed (`train.resume=DIR hydra.run.dir=DIR`)")
def _other_corpus(train_cli, trained_run, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    text = "\n\n".join(
        f"Tale {i}: the cat sat on the mat and the dog ran after the ball." for i in range(300)
    )
    corpus.write_text(text)
    data = ("data=text", f"data.path={corpus}", "data.vocab_size=300")
    run = tmp_path / "run"
    assert train_cli(*data, "train.seq_len=16", run_dir=run).code == 0
    corpus.write_text(text.replace("cat", "cow"))
    before = files_of(run)
    result = train_cli(*data, "train.seq_len=16", "train.max_steps=5", f"train.resume={run}", run_dir=run)
    assert files_of(run) == before  # .hydra/ and train.log as they were
    return result, "data"


@case("a signal while the command winds down after its run ended (Hydra finishing, the process exiting)")
def _signal_while_winding_down(train_cli, trained_run, tmp_path, monkeypatch):
    import normlab.cli as cli

    real = cli.release_claims

    def release_claims():  # after the command's run ended: what a late Ctrl-C or SIGTERM meets
        os.kill(os.getpid(), signal.SIGTERM)
        real()

    monkeypatch.setattr(cli, "release_claims", release_claims)
    result = train_cli()
    assert result.summary["status"] == "completed"
    return result, "SIGTERM"


AFTER_FULL_DISK = "`train.resume=auto` after a full disk stopped `metrics.jsonl`"


@case(AFTER_FULL_DISK)  # test_errors_table.py passes its own full-disk case as `disk_full_metrics`
def _auto_after_full_disk(train_cli, trained_run, tmp_path, monkeypatch, disk_full_metrics):
    first, _ = disk_full_metrics(train_cli, trained_run, tmp_path, monkeypatch)
    assert first.summary["status"] == "failed"
    monkeypatch.undo()
    result = train_cli(
        "train.resume=auto", "train.max_steps=50", "train.flush_every=1", run_dir=first.run_dir
    )
    assert training_steps(result) == list(range(50))
    return result, "metrics.jsonl"
