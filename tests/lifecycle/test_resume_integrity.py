"""A resume continues the same experiment with every step exactly once, or refuses in one sentence (issue 29,
findings 2, 3 and 5): another corpus, seed or learning rate; metrics.jsonl shorter than the checkpoint; a
damaged newest step checkpoint under train.resume=auto; a continue command that must work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from normlab.train.checkpoint import EXPERIMENT_KEY
from normlab.train.resume import ResumeRefused, check_corpus

STEPS = ["train.max_steps=8", "train.ckpt_every=3", "train.flush_every=1"]


def files_of(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in run.rglob("*")
        if p.is_file() and p.name != ".run.lock"
    }


def training_steps(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "loss" in r]


def comparable(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k != "tokens_per_s" and not k.startswith("resume/")} for r in rows]


def trained(directory: Path, cache_dir: Path, *overrides: str) -> Path:
    from cli_run import base_overrides

    from normlab.config.compose import compose_config
    from normlab.train.run import Run

    summary = Run(compose_config([*base_overrides([], cache_dir), *overrides]), directory).execute()
    assert summary["status"] == "completed", summary
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir) -> dict[str, Path]:
    """Completed runs, trained once for the module: 8 steps (step checkpoints at 3 and 6, last.pt at 8) and
    the uninterrupted 10-step run the resumed ones are compared with."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "8": trained(root / "run8", cache_dir, *STEPS),
        "10": trained(root / "run10", cache_dir, "train.max_steps=10", *STEPS[1:]),
    }


@pytest.fixture
def run8(runs, tmp_path) -> Path:
    """A copy of the completed 8-step run, in its own directory."""
    return Path(shutil.copytree(runs["8"], tmp_path / "run8", ignore=shutil.ignore_patterns(".run.lock")))


def as_interrupted(run: Path, at: str = "last.pt") -> None:
    """Make the completed run look interrupted at its last checkpoint (what a SIGTERM leaves)."""
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))


# ----------------------------------------------------------------------------------------------------
# finding 2: another corpus, seed or learning rate
# ----------------------------------------------------------------------------------------------------


def test_a_resume_with_another_corpus_seed_and_lr_is_refused_and_leaves_the_run_as_it_was(train_cli, run8):
    before = files_of(run8)
    result = train_cli(
        "train.max_steps=12",
        "data.corpus_seed=99",
        "data.n_train_stories=300",
        "seed=7",
        "optim.lr=0.05",
        f"train.resume={run8}",
        run_dir=run8,
    )
    assert result.code == 2 and "Traceback" not in result.output, result.output[-3000:]
    said = next(line for line in result.output.splitlines() if line.startswith("error: "))
    assert "was trained in another experiment" in said
    for part in (
        "seed=0 there, 7 here",
        "optim.lr=0.003 there, 0.05 here",
        "data.corpus_seed=1234 there, 99 here",
    ):
        assert part in said, said
    assert "train.resume_allow=[" in said
    assert files_of(run8) == before  # summary.json, .hydra/, metrics.jsonl, checkpoints: untouched


def test_auto_on_a_finished_run_of_another_experiment_does_not_relabel_it(train_cli, run8):
    before = files_of(run8)
    result = train_cli("train.max_steps=8", "seed=7", "train.resume=auto", run_dir=run8)
    assert result.code == 2 and "seed=0 there, 7 here" in result.output
    assert files_of(run8) == before  # .hydra/config.yaml still says seed 0


def test_a_deliberate_change_is_recorded_and_marked(train_cli, run8):
    as_interrupted(run8)
    result = train_cli(
        "train.max_steps=10",
        "optim.lr=0.01",
        "train.resume_allow=[optim.lr]",
        "train.resume=auto",
        run_dir=run8,
    )
    assert result.code == 0, result.output[-3000:]
    summary = result.summary
    assert summary["status"] == "completed" and summary["steps"] == 10
    assert summary["resume_changes"] == [{"step": 8, "key": "optim.lr", "was": 0.003, "now": 0.01}]
    rows = [json.loads(line) for line in (run8 / "metrics.jsonl").read_text().splitlines()]
    marked = [r["step"] for r in rows if r.get("resume/changed") == 1]
    assert marked == [8]  # the first row trained with the new setting
    assert training_steps(run8) == list(range(10))


def test_an_unknown_entry_of_resume_allow_is_invalid(train_cli, tmp_path):
    result = train_cli("train.resume_allow=[optim.l]", run_dir=tmp_path / "r")
    assert result.code == 2 and result.summary["status"] == "invalid"
    assert "did you mean optim.lr?" in result.summary["reason"]


def test_another_corpus_with_the_same_settings_is_refused_unless_allowed(tmp_path):
    """The corpus is compared by its files' hashes, so a data.path whose files changed is caught too."""
    entry = tmp_path / "entry"
    entry.mkdir()
    files = {"tokenizer.json": {"sha256": "a"}, "train.bin": {"sha256": "b"}, "val.bin": {"sha256": "c"}}
    (entry / "meta.json").write_text(json.dumps({"files": files}))
    same = {"corpus": {"tokenizer.json": "a", "train.bin": "b", "val.bin": "c"}}
    assert check_corpus(same, tmp_path / "last.pt", entry, []) == []
    other = {"corpus": {"tokenizer.json": "a", "train.bin": "OTHER", "val.bin": "c"}}
    with pytest.raises(ResumeRefused, match="trained on another corpus .*train.bin differ"):
        check_corpus(other, tmp_path / "last.pt", entry, [])
    (change,) = check_corpus(other, tmp_path / "last.pt", entry, ["data"])
    assert (change.key, change.was, change.now) == ("corpus", {"train.bin": "OTHER"}, {"train.bin": "b"})
    assert check_corpus(None, tmp_path / "last.pt", entry, []) == []  # an older checkpoint: not recorded


def test_a_checkpoint_saved_before_the_experiment_record_still_resumes(train_cli, run8, caplog):
    last = run8 / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    del state[EXPERIMENT_KEY]
    torch.save(state, last)
    for p in (run8 / "checkpoints").glob("step_*.pt"):
        p.unlink()
    as_interrupted(run8)
    result = train_cli(*STEPS[:1], "train.max_steps=9", "seed=7", f"train.resume={run8}", run_dir=run8)
    assert result.code == 0, result.output[-2000:]
    assert "saved before normlab recorded a run's experiment" in result.output


def test_the_record_holds_plain_values_only(run8):
    state = torch.load(run8 / "checkpoints" / "last.pt", weights_only=True)
    settings = state[EXPERIMENT_KEY]["settings"]
    assert settings["seed"] == 0 and settings["optim.lr"] == 0.003 and settings["data.corpus_seed"] == 1234
    assert "train.max_steps" not in settings and "model.d_model" not in settings
    assert set(state[EXPERIMENT_KEY]["corpus"]) == {"tokenizer.json", "train.bin", "val.bin"}


# ----------------------------------------------------------------------------------------------------
# finding 3: metrics.jsonl shorter than the checkpoint
# ----------------------------------------------------------------------------------------------------


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # mid-line, as a cut copy or a lost page leaves it


def test_a_hole_in_the_rows_is_refused_with_the_steps_and_the_ways_on(train_cli, run8):
    as_interrupted(run8)
    cut_in_half(run8 / "metrics.jsonl")
    kept = training_steps_lenient(run8)
    before = files_of(run8)
    result = train_cli("train.max_steps=10", f"train.resume={run8}", run_dir=run8)
    assert result.code == 2 and "Traceback" not in result.output, result.output[-3000:]
    said = next(line for line in result.output.splitlines() if line.startswith("error: "))
    first = max(kept) + 1
    assert f"has no rows for steps {first}–7, which last.pt (step 8) has trained" in said, said
    assert "train.resume_allow=[missing_rows]" in said and "train.resume=auto" in said
    assert files_of(run8) == before


def training_steps_lenient(run: Path) -> list[int]:
    steps = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "loss" in row:
            steps.append(row["step"])
    return steps


def test_auto_trains_the_missing_rows_again_from_a_checkpoint_they_cover(train_cli, run8, runs):
    reference = runs["10"]
    as_interrupted(run8)
    path = run8 / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]) + lines[5][:7])  # steps 0-4 whole, step 5's row torn
    result = train_cli(*STEPS[:1], "train.max_steps=10", *STEPS[1:], "train.resume=auto", run_dir=run8)
    assert result.code == 0, result.output[-3000:]
    assert "no rows for steps 5–7" in result.output and "step_000003.pt" in result.output
    assert training_steps(run8) == list(range(10))
    assert comparable(run8) == comparable(reference)  # every row as an uninterrupted run's, bit for bit


def test_a_deleted_metrics_file_is_refused_and_auto_starts_again(train_cli, run8):
    (run8 / "metrics.jsonl").unlink()
    as_interrupted(run8)
    result = train_cli("train.max_steps=10", f"train.resume={run8}", run_dir=run8)
    assert result.code == 2 and "has no rows for steps 0–7" in result.output
    for p in (run8 / "checkpoints").glob("step_*.pt"):
        p.unlink()
    result = train_cli("train.max_steps=10", "train.resume=auto", run_dir=run8)
    assert result.code == 0 and "starts again from step 0" in result.output
    assert training_steps(run8) == list(range(10))


def test_continuing_across_a_hole_on_purpose_is_recorded(train_cli, run8):
    as_interrupted(run8)
    cut_in_half(run8 / "metrics.jsonl")
    kept = training_steps_lenient(run8)
    result = train_cli(
        "train.max_steps=10", "train.resume_allow=[missing_rows]", f"train.resume={run8}", run_dir=run8
    )
    assert result.code == 0, result.output[-3000:]
    assert result.summary["missing_steps"] == [[max(kept) + 1, 7]]
    rows = [json.loads(line) for line in (run8 / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("resume/gap") == 1] == [8]


# ----------------------------------------------------------------------------------------------------
# finding 5: train.resume=auto and a damaged newest checkpoint; a continue command that works
# ----------------------------------------------------------------------------------------------------


def test_auto_skips_a_damaged_newest_step_checkpoint(train_cli, run8, runs):
    """A run killed after step checkpoints 3 and 6, its newest one cut short: auto resumes from step 3 (as
    train.resume=DIR does) and finishes with every row once."""
    reference = runs["8"]
    (run8 / "checkpoints" / "last.pt").unlink()
    newest = run8 / "checkpoints" / "step_000006.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    summary = json.loads((run8 / "summary.json").read_text())
    (run8 / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    result = train_cli(*STEPS, "train.resume=auto", run_dir=run8)
    assert result.code == 0, result.output[-3000:]
    assert "resuming from checkpoints/step_000003.pt (step 3)" in result.output
    assert training_steps(run8) == list(range(8))
    assert comparable(run8) == comparable(reference)


def test_with_only_an_empty_last_pt_the_printed_command_continues(train_cli, run8, tmp_path, monkeypatch):
    for p in (run8 / "checkpoints").glob("step_*.pt"):
        p.unlink()
    (run8 / "checkpoints" / "last.pt").write_bytes(b"")
    as_interrupted(run8)
    result = train_cli("train.max_steps=10", f"train.resume={run8}", run_dir=run8)
    assert result.code == 2
    said = next(line for line in result.output.splitlines() if line.startswith("error: "))
    assert "train.resume=auto" in said
    assert f"train.resume={run8} hydra.run.dir" not in result.output  # no command that fails again
    again = train_cli(
        "train.max_steps=10", "train.resume=auto", run_dir=run8
    )  # what the sentence says to run
    assert again.code == 0, again.output[-3000:]
    assert again.summary["status"] == "completed" and training_steps(run8) == list(range(10))


def test_copying_a_run_keeps_it_resumable(train_cli, run8, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run8, copy, ignore=shutil.ignore_patterns(".run.lock"))
    as_interrupted(copy)
    result = train_cli(*STEPS[:1], "train.max_steps=9", "train.resume=auto", run_dir=copy)
    assert result.code == 0, result.output[-2000:]
    assert training_steps(copy) == list(range(9))


def test_a_refused_resume_in_a_sweep_job_leaves_the_run_as_it_was(runs, run8, cache_dir):
    """Where no command line checked it first (a sweep's job, a Run started from code): the refusal still
    leaves the run's summary.json as it was, and says its sentence as the run's error."""
    from cli_run import base_overrides

    from normlab.config.compose import compose_config
    from normlab.train.resume import LeftAsItWas
    from normlab.train.run import Run

    as_interrupted(run8)
    before = json.loads((run8 / "summary.json").read_text())
    cfg = compose_config([*base_overrides([], cache_dir), *STEPS, "seed=7", "train.resume=auto"])
    with pytest.raises(LeftAsItWas, match="seed=0 there, 7 here"):
        Run(cfg, run8).execute()
    assert json.loads((run8 / "summary.json").read_text()) == before
