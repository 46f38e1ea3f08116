"""A run directory holds one history, and a refusal touches nothing (issue 39, points 3–6 and 10): a rewind
retires the checkpoints it abandons and train.resume=auto never continues another history; a checkpoint whose
tensor data is damaged (its zip index whole) is passed over, not resumed from in a loop; a refused resume or a
skipped auto leaves the directory byte for byte as it was — .hydra/ and train.log included; a row repeated in
metrics.jsonl is dropped at resume; `${oc.env:…}` values stay as written in what a run writes for people."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

STEPS = ["train.ckpt_every=5", "train.flush_every=1"]


def files_of(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in run.rglob("*")
        if p.is_file() and p.name != ".run.lock"
    }


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def comparable(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rows(run)]


def training_steps(run: Path) -> list[int]:
    return [r["step"] for r in rows(run) if "loss" in r]


@pytest.fixture(scope="module")
def run20(tmp_path_factory, cache_dir) -> Path:
    """An uninterrupted 20-step run with a step checkpoint every 5 steps (last.pt at 20)."""
    from cli_run import base_overrides

    from normlab.config.compose import compose_config
    from normlab.train.run import Run

    run_dir = tmp_path_factory.mktemp("history") / "run20"
    cfg = compose_config([*base_overrides([], cache_dir), "train.max_steps=20", *STEPS])
    assert Run(cfg, run_dir).execute()["status"] == "completed"
    return run_dir


@pytest.fixture
def run(run20, tmp_path) -> Path:
    return Path(shutil.copytree(run20, tmp_path / "run", ignore=shutil.ignore_patterns(".run.lock")))


# ----------------------------------------------------------------------------------------------------
# point 3: one history per run directory
# ----------------------------------------------------------------------------------------------------


def test_a_rewind_retires_what_it_abandons_and_auto_never_splices_two_histories(train_cli, run, run20):
    """The issue's command: rewind to step 5 with max_steps=10 (another history: its schedule ends at 10),
    cut the new last.pt short, then auto to 20. On main, auto resumed from the first history's
    step_000010.pt (steps 5–9 were the second history's, 10– the first's), exit 0, no warning."""
    ckpts = run / "checkpoints"
    rewind = train_cli("train.max_steps=10", *STEPS, f"train.resume={ckpts / 'step_000005.pt'}", run_dir=run)
    assert rewind.code == 0, rewind.output[-3000:]
    assert sorted(p.name for p in ckpts.glob("*.pt")) == ["last.pt", "step_000005.pt"]
    (retired,) = (ckpts / "retired").iterdir()  # the first history's, kept where nothing resumes from them
    assert sorted(p.name for p in retired.iterdir()) == ["last.pt", "step_000010.pt", "step_000015.pt"]
    assert "abandons by going on from step 5" in rewind.output
    last = ckpts / "last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    again = train_cli("train.max_steps=20", *STEPS, "train.resume=auto", run_dir=run)
    assert again.code == 0, again.output[-3000:]
    assert "resuming from checkpoints/step_000005.pt (step 5)" in again.output
    assert training_steps(run) == list(range(20))
    assert comparable(run) == comparable(run20)  # one history: the uninterrupted run's, bit for bit


def test_auto_passes_over_a_checkpoint_of_another_history_and_a_resume_from_it_is_refused(
    train_cli, run, run20
):
    """A directory spliced as an older normlab left it: a first-history step_000015.pt beside the rows of a
    second history that went past step 15. Each checkpoint records the row it follows (step 14's loss), so
    auto continues the newest checkpoint of the rows' history, and naming the other one is refused in one
    sentence with the directory untouched."""
    ckpts = run / "checkpoints"
    first = (ckpts / "step_000015.pt").read_bytes()
    rewind = train_cli("train.max_steps=10", *STEPS, f"train.resume={ckpts / 'step_000005.pt'}", run_dir=run)
    assert rewind.code == 0, rewind.output[-3000:]
    on = train_cli("train.max_steps=20", *STEPS, "train.resume=auto", run_dir=run)  # the second history to 20
    assert on.code == 0, on.output[-3000:]
    (ckpts / "step_000015.pt").write_bytes(first)  # put back, as if never retired
    (ckpts / "last.pt").unlink()
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    before = files_of(run)
    refused = train_cli("train.max_steps=20", *STEPS, f"train.resume={ckpts / 'step_000015.pt'}", run_dir=run)
    assert refused.code == 2 and "Traceback" not in refused.output, refused.output[-3000:]
    said = next(line for line in refused.output.splitlines() if line.startswith("error: "))
    assert "belongs to another history of the run in" in said and "train.resume=auto" in said
    assert files_of(run) == before
    auto = train_cli("train.max_steps=20", *STEPS, "train.resume=auto", run_dir=run)
    assert auto.code == 0, auto.output[-3000:]
    assert "step_000015.pt (step 15) belongs to another history than metrics.jsonl's rows" in auto.output
    assert "resuming from checkpoints/step_000005.pt (step 5)" in auto.output
    assert comparable(run) == comparable(run20)


# ----------------------------------------------------------------------------------------------------
# point 4: damaged data in a whole zip
# ----------------------------------------------------------------------------------------------------


def damage_data(path: Path) -> None:
    """XOR bytes 2000–6000 of the first tensor's data: the archive's index stays whole, torch.load with
    mmap opens it, and only reading the tensors (or their CRC-32) shows the damage."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    end = min(start + 6000, start + info.file_size)
    for i in range(start + min(2000, info.file_size // 2), end):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_auto_passes_over_a_checkpoint_whose_data_is_damaged(train_cli, run, run20):
    """On main every rerun said "cannot be read … truncated or not a normlab checkpoint", exit 2, for ever,
    rewriting .hydra/ and train.log each time."""
    from normlab.train import checkpoint

    damage_data(run / "checkpoints" / "last.pt")
    torch_opens = checkpoint._read(run / "checkpoints" / "last.pt", mmap=True)  # the index is whole
    assert torch_opens["step"] == 20 and not checkpoint.readable(run / "checkpoints" / "last.pt")
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    result = train_cli("train.max_steps=20", *STEPS, "train.resume=auto", run_dir=run)
    assert result.code == 0, result.output[-3000:]
    assert "resuming from checkpoints/step_000015.pt (step 15)" in result.output
    assert comparable(run) == comparable(run20)


def test_a_resume_from_a_file_whose_data_is_damaged_is_refused_before_writing(train_cli, run):
    last = run / "checkpoints" / "last.pt"
    damage_data(last)
    before = files_of(run)
    result = train_cli("train.max_steps=30", *STEPS, f"train.resume={last}", run_dir=run)
    assert result.code == 2 and "Traceback" not in result.output, result.output[-3000:]
    assert "does not match the checksum the file records: damaged data" in result.output
    assert files_of(run) == before


# ----------------------------------------------------------------------------------------------------
# point 5: a refusal changes nothing
# ----------------------------------------------------------------------------------------------------


def test_a_resume_refused_for_another_corpus_leaves_the_run_byte_identical(train_cli, tmp_path):
    """The corpus is known once built: on main the refusal came after Hydra had rewritten .hydra/ (the
    refused max_steps and resume) and appended to train.log."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "and",
        "the",
        "dog",
        "ran",
        "far",
        "away",
        "with",
        "a",
        "big",
        "red",
        "ball",
    ]
    text = "\n\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(60)) for i in range(300))
    (corpus / "a.txt").write_text(text)
    data = ["data=text", f"data.path={corpus}", "data.vocab_size=300"]
    run = tmp_path / "run"
    first = train_cli(*data, "train.max_steps=6", *STEPS, run_dir=run)
    assert first.code == 0, first.output[-3000:]
    (corpus / "a.txt").write_text(text.replace("cat", "cow"))
    before = files_of(run)
    refused = train_cli(*data, "train.max_steps=12", *STEPS, f"train.resume={run}", run_dir=run)
    assert refused.code == 2 and "trained on another corpus" in refused.output, refused.output[-3000:]
    assert (
        files_of(run) == before
    )  # .hydra/config.yaml, overrides.yaml, train.log, summary.json: as they were


def test_a_skipped_auto_leaves_a_finished_run_byte_identical(train_cli, run):
    before = files_of(run)
    result = train_cli(
        "train.max_steps=10", "experiment_name=renamed", *STEPS, "train.resume=auto", run_dir=run
    )
    assert result.code == 0 and "completed (20 steps): skipped" in result.output, result.output[-3000:]
    assert files_of(run) == before  # .hydra/config.yaml still says max_steps 20 and the old name


# ----------------------------------------------------------------------------------------------------
# point 6: a repeated row
# ----------------------------------------------------------------------------------------------------


def test_a_repeated_row_does_not_survive_a_resume(train_cli, run):
    path = run / "metrics.jsonl"
    row = next(line for line in path.read_text().splitlines() if '"loss"' in line and '"step": 10,' in line)
    with path.open("a") as f:
        f.write(row + "\n")
    result = train_cli("train.max_steps=25", *STEPS, "train.resume=auto", run_dir=run)
    assert result.code == 0, result.output[-3000:]
    assert "dropped 1 repeated row(s) of step(s) 10" in result.output
    assert training_steps(run) == list(range(25))


# ----------------------------------------------------------------------------------------------------
# point 10: values from the environment stay as written
# ----------------------------------------------------------------------------------------------------


def test_a_name_from_the_environment_is_never_written_resolved(train_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLAB_TEST_SECRET", "hunter2-only-in-the-environment")
    result = train_cli("name=${oc.env:NORMLAB_TEST_SECRET}", run_dir=tmp_path / "run")
    assert result.code == 0, result.output[-3000:]
    assert "hunter2" not in result.output
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file() and f.suffix in (".json", ".log", ".jsonl", ".yaml"):
            assert "hunter2" not in f.read_text(errors="replace"), f
    assert result.summary["name"] == "${oc.env:NORMLAB_TEST_SECRET}"


def test_a_refused_value_from_the_environment_is_named_as_written(train_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLAB_TEST_HOME", "/home/someone-private")
    result = train_cli("seed=${oc.env:NORMLAB_TEST_HOME}", run_dir=tmp_path / "run")
    assert result.code == 2 and "someone-private" not in result.output, result.output[-3000:]
    assert "seed=${oc.env:NORMLAB_TEST_HOME} is not allowed" in result.summary["reason"]
    assert result.summary["seed"] == "${oc.env:NORMLAB_TEST_HOME}"
    assert "someone-private" not in (tmp_path / "run" / "summary.json").read_text()
