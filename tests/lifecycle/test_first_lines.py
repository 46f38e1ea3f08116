"""What a run without a terminal says as it trains: the step time measured on its first steps, then a
progress line every train.log_every steps, on the console and in train.log — and, before anything is built,
the known failure its setup matches."""

from __future__ import annotations

import re


def test_a_run_without_a_terminal_logs_its_progress(train_cli, tmp_path):
    result = train_cli(
        "train.max_steps=8",
        "train.log_every=3",
        "train.flush_every=2",
        "warmup_steps=2",
        run_dir=tmp_path / "r",
    )
    assert result.code == 0, result.output
    said = [line for line in result.output.splitlines() if "][normlab" in line]
    text = "\n".join(said)
    # measured on the run's own first flush window (steps 0-1), once training has started
    assert text.index("training from step 0") < text.index("step time measured on the first steps: ")
    # every third step and the last: steps 3, 6 and 8 of 8, each with the numbers of its row
    pattern = r"\[[^\]]+\] step (\d+)/8 \(\d+%\) · loss \d+\.\d{3} · lr \S+ · grad norm \S+ · [\d,]+ tok/s · "
    on_console = [int(m.group(1)) for m in re.finditer(pattern, text)]
    assert on_console == [3, 6, 8]
    log = (result.run_dir / "train.log").read_text()
    assert [int(m.group(1)) for m in re.finditer(pattern, log)] == [3, 6, 8]
    assert "ETA" in log


def test_the_known_failure_is_said_before_anything_is_built(train_cli, tmp_path):
    result = train_cli("placement=post", "train.max_steps=2", "warmup_steps=5", run_dir=tmp_path / "r")
    assert result.code == 0, result.output
    said = [line for line in result.output.splitlines() if "][normlab" in line]
    first = [line.split(" - ", 1)[1] for line in said[:2]]
    assert first[0].startswith("pre-flight: tied N(0, 0.02) embeddings with placement=post")
    assert first[1].startswith("pre-flight: warmup_steps=5 ≥ train.max_steps=2")
    assert result.summary["preflight"] == [f.removeprefix("pre-flight: ") for f in first]
