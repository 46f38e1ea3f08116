"""docs/errors.md, "When something goes wrong": every row of its table, run through train.py, gives its
sentence.

A row whose first cell is only overrides (`optim.lr=-1`) runs them as they are; any other row has a case
below that sets the fault up. Each check: the exit code and status of the row, the row's sentence (with `…`
for what depends on the run), the key or file it must name, and no traceback anywhere in the output.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_run import ROOT, SYNTHETIC, CliRun, base_overrides
from errors_table_history import AFTER_FULL_DISK
from errors_table_history import CASES as HISTORY_CASES

ERRORS_PAGE = ROOT / "docs" / "errors.md"
HEADER = "| what goes wrong | status · exit | the sentence you get | what is kept |"
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\[[^\]]*\]\[[A-Z]+\] - ")


@dataclass(frozen=True)
class Row:
    what: str
    status: str | None  # None: nothing is written (Hydra-level)
    exit_code: int
    sentence: str

    @property
    def overrides(self) -> list[str] | None:
        m = re.fullmatch(r"`([^`]+)`", self.what)
        return m.group(1).split() if m else None


def table_rows() -> list[Row]:
    lines = ERRORS_PAGE.read_text().splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        what, status, sentence, _kept = (c.strip() for c in line.strip().strip("|").split(" | "))
        state, code = (part.strip() for part in status.split("·"))
        rows.append(Row(what, None if state == "—" else state.strip("`"), int(code), sentence))
    return rows


def matches(template: str, text: str) -> bool:
    pattern = ".+?".join(re.escape(part) for part in template.split("…"))
    return re.fullmatch(pattern, text.strip()) is not None


def candidates(result: CliRun) -> list[str]:
    """Where a sentence can be: summary.json's reason, or a console line (log, error: or interrupted:)."""
    found = []
    summary = result.summary
    if summary and summary.get("reason"):
        found.append(summary["reason"])
    for line in result.output.splitlines():
        line = LOG_PREFIX.sub("", line)
        for prefix in ("error: ", "interrupted: ", "invalid config, skipped: ", "invalid config: "):
            line = line.removeprefix(prefix)
        found.append(line)
    return found


# ----------------------------------------------------------------------------------------------------
# Rows that need a setup: each returns the run's result and what its sentence must name
# ----------------------------------------------------------------------------------------------------

CASES: dict[str, Callable[..., tuple[CliRun, str]]] = {}


def case(what: str) -> Callable:
    def register(fn: Callable) -> Callable:
        CASES[what] = fn
        return fn

    return register


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".run.lock"))
    return dst


def emit_hook(monkeypatch: pytest.MonkeyPatch, at_step: int, action: Callable[[], None]) -> None:
    """Call `action` once, while metrics.jsonl receives the row of `at_step` (inside the training loop)."""
    from normlab.metrics.sinks import JsonlSink

    real = JsonlSink.log
    fired = []

    def log(self, row):
        real(self, row)
        if row.get("step") == at_step and not fired:
            fired.append(1)
            action()

    monkeypatch.setattr(JsonlSink, "log", log)


def self_signal(signum: int) -> Callable[[], None]:
    return lambda: os.kill(os.getpid(), signum)


@case("resuming a depth-2 run with `depth=3`")
def _resume_other_model(train_cli, trained_run, tmp_path, monkeypatch):
    before = (trained_run / "summary.json").read_bytes()
    result = train_cli(f"train.resume={trained_run}", "depth=3")
    assert (trained_run / "summary.json").read_bytes() == before
    return result, "depth"


@case("resuming an `ln` run with `norm=rms`")
def _resume_other_norm(train_cli, trained_run, tmp_path, monkeypatch):
    return train_cli(f"train.resume={trained_run}", "norm=rms"), "norm"


def files_of(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".run.lock"}


def interrupted_run(trained_run: Path, dst: Path) -> Path:
    """A copy of the 3-step run as a SIGTERM at step 3 leaves it."""
    run = copy_run(trained_run, dst)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    return run


def cut_after_row(run: Path, kept: int) -> None:
    """metrics.jsonl cut in the middle of the row after the first `kept` rows."""
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:kept]) + lines[kept][:9])


@case(
    "resuming a run in its own directory with another seed, learning rate and corpus (`seed=7 optim.lr=0.05 "
    "data.corpus_seed=99 train.resume=DIR hydra.run.dir=DIR`)"
)
def _resume_other_experiment(train_cli, trained_run, tmp_path, monkeypatch):
    run = interrupted_run(trained_run, tmp_path / "run")
    before = files_of(run)
    result = train_cli("seed=7", "optim.lr=0.05", "data.corpus_seed=99", f"train.resume={run}", run_dir=run)
    assert files_of(run) == before
    assert "data.corpus_seed=1234 there, 99 here" in result.output
    return result, "seed"


@case("resuming a run whose `metrics.jsonl` was cut short (`train.resume=DIR hydra.run.dir=DIR`)")
def _resume_rows_missing(train_cli, trained_run, tmp_path, monkeypatch):
    run = interrupted_run(trained_run, tmp_path / "run")
    cut_after_row(run, 2)
    before = files_of(run)
    result = train_cli(f"train.resume={run}", run_dir=run)
    assert files_of(run) == before
    return result, "metrics.jsonl"


@case("`train.resume=auto` in a directory whose `metrics.jsonl` was cut short")
def _auto_rows_missing(train_cli, trained_run, tmp_path, monkeypatch):
    run = interrupted_run(trained_run, tmp_path / "run")
    cut_after_row(run, 2)
    result = train_cli("train.resume=auto", "train.max_steps=4", run_dir=run)
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2, 3]
    return result, "metrics.jsonl"


@case("`train.resume=auto` where the newest step checkpoint of a killed run is damaged")
def _auto_damaged_step(train_cli, trained_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert train_cli("train.max_steps=5", "train.ckpt_every=2", run_dir=run).code == 0
    (run / "checkpoints" / "last.pt").unlink()
    newest = run / "checkpoints" / "step_000004.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    result = train_cli("train.resume=auto", "train.max_steps=5", "train.ckpt_every=2", run_dir=run)
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2, 3, 4]
    return result, "step_000002.pt"


@case("`train.resume=DIR hydra.run.dir=DIR` where every checkpoint in DIR is damaged (an empty `last.pt`)")
def _resume_all_damaged(train_cli, trained_run, tmp_path, monkeypatch):
    run = interrupted_run(trained_run, tmp_path / "run")
    (run / "checkpoints" / "step_000002.pt").unlink()
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    before = files_of(run)
    result = train_cli(f"train.resume={run}", run_dir=run)
    assert files_of(run) == before
    assert "continue with:" not in result.output  # no command that would fail the same way
    return result, "train.resume=auto"


def killed_run(trained_run: Path, dst: Path, keep: tuple[str, ...]) -> Path:
    """A copy of the 3-step run as SIGKILL leaves one: summary.json `running`, only `keep`'s checkpoints."""
    run = copy_run(trained_run, dst)
    for ckpt in (run / "checkpoints").glob("*.pt"):
        if ckpt.name not in keep:
            ckpt.unlink()
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    return run


@case("`train.resume=auto` in the directory of a run killed (SIGKILL) after a step checkpoint")
def _auto_after_kill(train_cli, trained_run, tmp_path, monkeypatch):
    run = killed_run(trained_run, tmp_path / "killed", keep=("step_000002.pt",))
    result = train_cli("train.resume=auto", "train.max_steps=4", run_dir=run)
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2, 3]  # step 2 on again, none twice
    return result, "step_000002.pt"


@case("`train.resume=auto` in the directory of a run killed before its first checkpoint")
def _auto_no_checkpoint(train_cli, trained_run, tmp_path, monkeypatch):
    run = killed_run(trained_run, tmp_path / "killed", keep=())
    result = train_cli("train.resume=auto", run_dir=run)
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2]
    return result, "step 0"


@case("`train.resume=DIR` where the run in DIR saved no checkpoint")
def _resume_no_checkpoint(train_cli, trained_run, tmp_path, monkeypatch):
    run = killed_run(trained_run, tmp_path / "killed", keep=())
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = train_cli(f"train.resume={run}")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    return result, "train.resume=auto"


def sweep_cli(train_cli, sweep: Path, *overrides: str, job: str | None = None) -> CliRun:
    """train.py -m in this process (the basic launcher); the result's run_dir is the job directory `job`."""
    result = train_cli("-m", *overrides, f"hydra.sweep.dir={sweep}")
    return CliRun(result.code, result.output, sweep / job if job else result.run_dir)


@case("Ctrl-C during a sweep (`-m`)")
def _sweep_ctrl_c(train_cli, trained_run, tmp_path, monkeypatch):
    emit_hook(monkeypatch, 1, self_signal(signal.SIGINT))
    result = sweep_cli(
        train_cli,
        tmp_path / "sweep",
        "seed=0,1",
        "train.max_steps=50",
        "train.flush_every=1",
        job="0_ln-pre-L2-w2-s0",
    )
    assert not (tmp_path / "sweep" / "1_ln-pre-L2-w2-s1").exists()  # no job starts after the signal
    assert "continue the sweep with: python train.py -m " in result.output
    return result, "SIGINT"


@case("that sweep's continue command (the same `-m` command with `train.resume=auto`)")
def _sweep_continue(train_cli, trained_run, tmp_path, monkeypatch):
    first = _sweep_ctrl_c(train_cli, trained_run, tmp_path, monkeypatch)[0]
    assert first.code == 130
    overrides = ("seed=0,1", "train.max_steps=50", "train.flush_every=1", "train.resume=auto")
    result = sweep_cli(train_cli, tmp_path / "sweep", *overrides, job="0_ln-pre-L2-w2-s0")
    for job in ("0_ln-pre-L2-w2-s0", "1_ln-pre-L2-w2-s1"):
        rows = CliRun(0, "", tmp_path / "sweep" / job).rows()
        assert [r["step"] for r in rows if "loss" in r] == list(range(50))
    return result, "continuing"


@case("the same `-m` command into a directory that holds a sweep, without `train.resume=auto`")
def _sweep_again(train_cli, trained_run, tmp_path, monkeypatch):
    assert sweep_cli(train_cli, tmp_path / "sweep", "seed=0").code == 0
    return sweep_cli(train_cli, tmp_path / "sweep", "seed=0"), "hydra.sweep.dir"


@case("continuing a sweep while another process runs one of its jobs")
def _sweep_busy(train_cli, trained_run, tmp_path, monkeypatch):
    from filelock import FileLock

    assert sweep_cli(train_cli, tmp_path / "sweep", "seed=0").code == 0
    with FileLock(str(tmp_path / "sweep" / "0_ln-pre-L2-w2-s0" / ".run.lock")):
        return sweep_cli(train_cli, tmp_path / "sweep", "seed=0", "train.resume=auto"), ".run.lock"


@case("a second sweep into a sweep directory while the first one runs")
def _sweep_dir_in_use(train_cli, trained_run, tmp_path, monkeypatch):
    from filelock import FileLock

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    with FileLock(str(sweep / ".run.lock")):  # what the first sweep's parent holds while it runs
        result = sweep_cli(train_cli, sweep, "seed=0,1")
    assert sorted(p.name for p in sweep.iterdir()) == [".run.lock"]  # no multirun.yaml, no job written
    return result, "hydra.sweep.dir"


@case("a sweep with an invalid job (`-m depth=0,2`)")
def _sweep_invalid(train_cli, trained_run, tmp_path, monkeypatch):
    result = sweep_cli(train_cli, tmp_path / "sweep", "depth=0,2", job="0_ln-pre-L0-w2-s0")
    assert (
        json.loads((tmp_path / "sweep" / "1_ln-pre-L2-w2-s0" / "summary.json").read_text())["status"]
        == "completed"
    )
    assert "[sweep] finished: " in result.output  # every job completed or was recorded invalid: exit 0
    return result, "depth"


@case("`kill -TERM PID` of a `hydra/launcher=joblib` sweep's parent process alone")
def _joblib_parent_sigterm(train_cli, trained_run, tmp_path, monkeypatch):
    from soak.processes import SweepProcess, env, workers

    sweep = tmp_path / "sweep"
    args = [*base_overrides([], tmp_path / "cache"), "train.max_steps=100000", "train.flush_every=100000"]
    args += ["seed=0,1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    proc = SweepProcess([str(ROOT / "train.py"), "-m", *args], tmp_path / "log", env())
    deadline = time.monotonic() + 240
    while len(list(sweep.glob("*/metrics.jsonl"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    running = workers(proc.pid)
    os.kill(proc.pid, signal.SIGTERM)
    code, _ = proc.wait(240)
    assert proc.lingering(10) == [] and len(running) == 2
    for job in ("0_ln-pre-L2-w2-s0", "1_ln-pre-L2-w2-s1"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        state = torch.load(sweep / job / "checkpoints" / "last.pt", weights_only=True)
        assert summary["status"] == "interrupted" and state["step"] == summary["steps"] > 0
    return CliRun(code or 0, (tmp_path / "log").read_text(), sweep / "0_ln-pre-L2-w2-s0"), "SIGTERM"


@case("`hydra.run.dir` below a file")
def _run_dir_below_file(train_cli, trained_run, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    return train_cli(run_dir=tmp_path / "a-file" / "run"), "hydra.run.dir"


@case("`hydra.run.dir` holds an earlier run")
def _run_dir_holds_a_run(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "earlier")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = train_cli(run_dir=run)
    # the lock (taken before looking, so that two starts cannot both pass) is the only file it touches
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".run.lock"} == before
    assert not (run / ".hydra").exists()  # refused before Hydra wrote its config there
    return result, "hydra.run.dir"


@case("a new run in the directory of a run that was killed (SIGKILL, power cut)")
def _run_dir_running(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "running")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    return train_cli(run_dir=run), "hydra.run.dir"


@case("two runs in one directory at the same time (a second run or a resume while the first is going)")
def _run_dir_locked(train_cli, trained_run, tmp_path, monkeypatch):
    from filelock import FileLock

    run = copy_run(trained_run, tmp_path / "locked")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with FileLock(str(run / ".run.lock")):  # what a live run holds
        result = train_cli(run_dir=run)
        assert train_cli(f"train.resume={run}", run_dir=run).code == 2
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".run.lock"}
    assert after == before  # refused before Hydra wrote .hydra/ or anything else
    return result, "hydra.run.dir"


@case("`data=tinystories` with no network and no `data.path`")
def _no_network(train_cli, trained_run, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    cache = tmp_path / "cache"
    result = train_cli("data=tinystories", cache=cache)
    assert not cache.exists()  # no cache folder, no lock file
    assert "building the data cache" not in result.output  # the sentence is the first thing said about data
    return result, "data.path"


def text_corpus_case(content: bytes) -> Callable:
    def run(train_cli, trained_run, tmp_path, monkeypatch):
        corpus = tmp_path / "corpus.txt"
        corpus.write_bytes(content)
        cache = tmp_path / "cache"
        result = train_cli("data=text", f"data.path={corpus}", cache=cache)
        assert not cache.exists() or not any(cache.iterdir())  # no half-built cache
        return result, "data.path"

    return run


CASES["`data=text` with a binary file as `data.path`"] = text_corpus_case(bytes(range(256)) * 64)
CASES["`data=text` with a Latin-1 (not UTF-8) text file"] = text_corpus_case(
    "Le café était fermé.\n\nIl pleuvait à Noël.\n".encode("latin-1")
)
CASES["`data=text` with an empty file"] = text_corpus_case(b"")
CASES["`data=text` with a corpus shorter than one window"] = text_corpus_case(
    "\n\n".join(f"Tale {i}." for i in range(8)).encode()
)


@case("`train.device=cuda` on a machine without CUDA")
def _no_cuda(train_cli, trained_run, tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    return train_cli("train.device=cuda"), "train.device"


@case("`train.resume=FILE` with FILE truncated")
def _truncated_checkpoint(train_cli, trained_run, tmp_path, monkeypatch):
    data = (trained_run / "checkpoints" / "last.pt").read_bytes()
    broken = tmp_path / "broken.pt"
    broken.write_bytes(data[: len(data) // 2])
    result = train_cli(f"train.resume={broken}")
    assert broken.read_bytes() == data[: len(data) // 2]
    return result, "train.resume"


class FillingFile:
    """A file whose disk fills up after `room` bytes: writes beyond it fail with ENOSPC, as a full disk's do
    (what torch's own writer and a metrics row then meet)."""

    def __init__(self, f, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


@case("disk full while writing a checkpoint")
def _disk_full(train_cli, trained_run, tmp_path, monkeypatch):
    """torch.save itself meets the full disk (its RuntimeError raised while handling the OSError), not a
    stub that raises the OSError in its place; tests/lifecycle/test_disk_full.py does it on a real 2 MB
    file system where one can be mounted."""
    import normlab.train.checkpoint as ckpt

    real_save = ckpt.torch.save
    monkeypatch.setattr(
        ckpt.torch, "save", lambda obj, f, *a, **k: real_save(obj, FillingFile(f, 4096), *a, **k)
    )
    result = train_cli()
    assert [r["step"] for r in result.rows() if "loss" in r] == [0, 1, 2]  # every row made it
    assert "enforce fail" not in result.output
    return result, "checkpoints/last.pt"


@case("disk full while writing `metrics.jsonl`")
def _disk_full_metrics(train_cli, trained_run, tmp_path, monkeypatch):
    from normlab.metrics.sinks import JsonlSink

    real_init = JsonlSink.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._file = FillingFile(self._file, 2000)

    monkeypatch.setattr(JsonlSink, "__init__", init)
    result = train_cli("train.max_steps=50", "train.flush_every=1")
    lines = (result.run_dir / "metrics.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["step"] == i for i, line in enumerate(lines))  # whole rows
    return result, "metrics.jsonl"


@case("`checkpoints/last.pt` damaged, an older `step_N.pt` readable")
def _damaged_last(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "damaged")
    last = run / "checkpoints" / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    result = train_cli(f"train.resume={run}", "train.max_steps=4", run_dir=run)
    steps = [r["step"] for r in result.rows() if "loss" in r]
    assert steps == [0, 1, 2, 3]  # resumed at step 2: rows 2.. recomputed, none duplicated
    return result, "last.pt"


@case("killed (SIGKILL, power cut) while writing a checkpoint")
def _killed_mid_write(train_cli, trained_run, tmp_path, monkeypatch):
    run = copy_run(trained_run, tmp_path / "killed")
    leftover = run / "checkpoints" / ".last.pt.x7k2q9.tmp"
    leftover.write_bytes((run / "checkpoints" / "last.pt").read_bytes()[:5000])
    result = train_cli(f"train.resume={run}", "train.max_steps=4", run_dir=run)
    assert not leftover.exists()
    assert json.loads((run / "summary.json").read_text())["resumed_from"].endswith("last.pt (step 3)")
    return result, "last.pt"


def damaged_cache_case(damage: Callable[[Path], None]) -> Callable:
    def run(train_cli, trained_run, tmp_path, monkeypatch):

        from normlab.data import load_corpus

        cache = tmp_path / "cache"
        data = {o.split("=")[0].removeprefix("data."): o.split("=")[1] for o in SYNTHETIC[1:]}
        first = load_corpus({"name": "synthetic", **data, "vocab_size": 512, "cache_dir": str(cache)})
        tokens = np.array(first.train)  # a copy: the memmap would see the damage (or fault on a truncation)
        damage(first.cache_dir / "train.bin")
        result = train_cli(cache=cache)
        again = load_corpus({"name": "synthetic", **data, "vocab_size": 512, "cache_dir": str(cache)})
        assert np.array_equal(np.asarray(again.train), tokens)
        return result, "train.bin"

    return run


def _garbage(path: Path) -> None:
    path.write_bytes(np.random.default_rng(0).integers(0, 256, path.stat().st_size, dtype=np.uint8).tobytes())


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


CASES["token cache overwritten with garbage of the same size"] = damaged_cache_case(_garbage)
CASES["token cache truncated"] = damaged_cache_case(_truncate)


@case("W&B cannot start (no service, no network)")
def _wandb_down(train_cli, trained_run, tmp_path, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("no service")

    monkeypatch.setattr(wandb, "init", broken_init)
    monkeypatch.setenv("WANDB_MODE", "offline")
    return train_cli("logger=wandb"), "W&B"


def signal_case(signum: int) -> Callable:
    def run(train_cli, trained_run, tmp_path, monkeypatch):
        emit_hook(monkeypatch, 1, self_signal(signum))
        result = train_cli("train.max_steps=50", "train.flush_every=1")
        summary = result.summary
        steps = [r["step"] for r in result.rows() if "loss" in r]
        assert steps == list(range(summary["steps"])) and 1 < summary["steps"] < 50
        state = torch.load(result.run_dir / "checkpoints" / "last.pt", weights_only=True)
        assert state["step"] == summary["steps"]
        assert (
            "train.resume=" in summary["resume_command"] and "resume with: python train.py" in result.output
        )
        return result, signal.Signals(signum).name

    return run


CASES["`kill -TERM` (schedulers, `timeout`, `docker stop`)"] = signal_case(signal.SIGTERM)
CASES["Ctrl-C"] = signal_case(signal.SIGINT)
CASES["SIGUSR1 (SLURM's warning before the time limit)"] = signal_case(signal.SIGUSR1)


@case("a second signal while the checkpoint is being saved")
def _second_signal(train_cli, trained_run, tmp_path, monkeypatch):
    import normlab.train.checkpoint as ckpt

    real_save = ckpt.torch.save

    def save_with_a_signal(obj, f, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives in the middle of writing last.pt
        return real_save(obj, f, *args, **kwargs)

    emit_hook(
        monkeypatch,
        1,
        lambda: (
            os.kill(os.getpid(), signal.SIGTERM),
            monkeypatch.setattr(ckpt.torch, "save", save_with_a_signal),
        ),
    )
    result = train_cli("train.max_steps=50", "train.flush_every=1")
    state = torch.load(result.run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["step"] == result.summary["steps"]  # the save finished, whole
    return result, "SIGTERM"


@case("signals after the run's summary is written (while its sample is written)")
def _signals_after_the_end(train_cli, trained_run, tmp_path, monkeypatch):
    import normlab.train.sample as sample_mod

    real = sample_mod.generate

    def generate(*args, **kwargs):  # three: the count that stops a run without saving, were it still going
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(sample_mod, "generate", generate)
    result = train_cli("train.sample_tokens=4")
    assert (result.run_dir / "sample.txt").read_text().strip()
    assert result.summary["reason"] is None
    return result, "SIGTERM"


@case("a signal before training starts (building the data)")
def _signal_before_training(train_cli, trained_run, tmp_path, monkeypatch):
    import normlab.train.build as build_mod

    real = build_mod.load_corpus

    def load(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(build_mod, "load_corpus", load)
    result = train_cli()
    assert not (result.run_dir / "checkpoints").exists()
    return result, "SIGTERM"


@case("`train.resume=auto` without `hydra.run.dir`")
def _resume_auto_without_run_dir(train_cli, trained_run, tmp_path, monkeypatch):
    """train.py's own argv, without the hydra.run.dir train_cli adds: refused before Hydra reads it."""
    import contextlib
    import io
    import runpy
    import sys

    from cli_run import TRAIN

    monkeypatch.chdir(tmp_path)  # a run that did start would write outputs/ here
    monkeypatch.setattr(
        sys, "argv", [str(TRAIN), *base_overrides([], tmp_path / "cache"), "train.resume=auto"]
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
        runpy.run_path(str(TRAIN), run_name="__main__")
    assert not (tmp_path / "outputs").exists()
    return CliRun(stop.value.code, err.getvalue(), tmp_path / "none"), "hydra.run.dir"


for _what, _case in HISTORY_CASES.items():  # issue 39's rows (tests/lifecycle/errors_table_history.py)
    CASES[_what] = (
        functools.partial(_case, disk_full_metrics=_disk_full_metrics) if _what == AFTER_FULL_DISK else _case
    )

# ----------------------------------------------------------------------------------------------------


ROWS = table_rows()


def test_the_table_is_long_and_every_row_has_a_test() -> None:
    assert len(ROWS) >= 25
    described = {r.what for r in ROWS if r.overrides is None}
    assert described == set(CASES), "docs/errors.md rows and CASES disagree"


@pytest.mark.parametrize("row", ROWS, ids=[r.what.strip("`")[:60] for r in ROWS])
def test_row(row: Row, train_cli, trained_run, tmp_path, monkeypatch) -> None:
    if row.overrides is not None:
        result = train_cli(*row.overrides)
        key = row.overrides[0].split("=")[0].lstrip("+")
    else:
        result, key = CASES[row.what](train_cli, trained_run, tmp_path, monkeypatch)
    assert "Traceback" not in result.output, result.output[-3000:]
    assert result.code == row.exit_code, result.output[-3000:]
    summary = result.summary
    if row.status is None:
        if row.overrides is not None:
            assert not result.run_dir.exists()  # nothing written, not even the directory
    else:
        assert summary is not None and summary["status"] == row.status, (summary, result.output[-2000:])
    found = [c for c in candidates(result) if matches(row.sentence, c)]
    assert found, f"no output matches {row.sentence!r}:\n" + "\n".join(candidates(result))
    assert key in found[0], (key, found[0])
