"""What a run says while it trains (normlab.train.progress): the progress line's numbers from the rows,
seconds per step and ETA from the rows' own tokens_per_s (not from when rows arrive), lines at the set
interval, to train.log only where a bar or a parallel sweep owns the console, and the step-time hint from
the first real steps."""

from __future__ import annotations

import logging

import pytest

from normlab.metrics import names
from normlab.train.progress import ProgressBar, ProgressLog, StepClock, fmt_duration, progress_line

TOKENS_PER_STEP = 32 * 64


def row(step: int, tps: float, loss: float = 3.0) -> dict:
    return {
        names.STEP: step,
        names.LOSS: loss,
        names.LR: 3e-3,
        names.GRAD_NORM: 0.8,
        names.TOKENS_PER_S: tps,
    }


def blocks(n_blocks: int, per_block: int, tps_of) -> list[dict]:
    """Rows as PendingRows hands them over: every row of a flush window carries that window's tokens/s."""
    return [row(b * per_block + i, tps_of(b)) for b in range(n_blocks) for i in range(per_block)]


def test_step_clock_counts_each_flush_window_once():
    clock = StepClock(TOKENS_PER_STEP)
    for r in blocks(2, 10, lambda b: TOKENS_PER_STEP / (0.5 if b == 0 else 0.1)):
        clock.observe(r)
    assert clock.latest == pytest.approx(0.1)
    # 0.3 · 0.1 + 0.7 · 0.5: two windows, not twenty rows
    assert clock.average == pytest.approx(0.3 * 0.1 + 0.7 * 0.5)
    assert clock.eta(100) == pytest.approx(100 * clock.average)


def test_progress_line_says_what_the_row_says():
    clock = StepClock(TOKENS_PER_STEP)
    r = row(99, TOKENS_PER_STEP / 0.09, loss=3.4123)
    clock.observe(r)
    line = progress_line("ln-post-L6-w100-s0", r, 2000, clock)
    assert line == (
        "[ln-post-L6-w100-s0] step 100/2000 (5%) · loss 3.412 · lr 3.00e-03 · grad norm 0.8 · "
        f"{TOKENS_PER_STEP / 0.09:,.0f} tok/s · 90 ms/step · ETA {fmt_duration(1900 * 0.09)}"
    )
    assert fmt_duration(1900 * 0.09) == "2.9 min"


def lines_of(caplog, callback, rows) -> list[str]:
    with caplog.at_level(logging.INFO, logger="normlab"):
        for r in rows:
            callback.on_step(r)
    return [rec.getMessage() for rec in caplog.records]


def test_lines_at_the_set_interval_and_at_the_last_step(caplog):
    log = ProgressLog("run", 45, 20, TOKENS_PER_STEP)
    said = lines_of(caplog, log, blocks(5, 9, lambda b: 1000.0 + b))
    assert [s.split(" · ")[0] for s in said] == [
        "[run] step 20/45 (44%)",
        "[run] step 40/45 (89%)",
        "[run] step 45/45 (100%)",
    ]
    assert lines_of(caplog, ProgressLog("run", 45, 0, TOKENS_PER_STEP), blocks(1, 5, lambda b: 1.0)) == said


def test_the_hint_is_the_first_windows_step_time(caplog):
    slow = TOKENS_PER_STEP / 2.5  # 2.5 s a step
    log = ProgressLog("run", 1000, 0, TOKENS_PER_STEP, hint=True, tiny_flops_ratio=12.3)
    first, tiny = lines_of(caplog, log, blocks(2, 10, lambda b: slow))
    assert first.startswith(
        "step time measured on the first steps: 2.50 s a step, so the 1000 steps to go take about 41.7 min"
    )
    assert "model=tiny (d_model 64, context 64) needs 12× fewer FLOPs a step" in tiny
    caplog.clear()
    fast = ProgressLog("run", 1000, 0, TOKENS_PER_STEP, hint=True, tiny_flops_ratio=12.3)
    (line,) = lines_of(caplog, fast, blocks(2, 10, lambda b: TOKENS_PER_STEP / 0.05))
    assert "50 ms a step" in line  # fast enough: no pointer at model=tiny


def test_console_false_writes_train_log_only(tmp_path, capsys):
    root = logging.getLogger()
    file_handler = logging.FileHandler(tmp_path / "train.log")
    console = logging.StreamHandler()
    root.addHandler(file_handler)
    root.addHandler(console)
    try:
        log = ProgressLog("job", 10, 5, TOKENS_PER_STEP, console=False)
        for r in blocks(1, 10, lambda b: 100.0):
            log.on_step(r)
    finally:
        root.removeHandler(file_handler)
        root.removeHandler(console)
        file_handler.close()
    written = (tmp_path / "train.log").read_text().splitlines()
    assert [w.split(" · ")[0] for w in written] == ["[job] step 5/10 (50%)", "[job] step 10/10 (100%)"]
    assert "[job]" not in capsys.readouterr().err


def test_the_bar_takes_its_rate_from_the_rows(capsys):
    bar = ProgressBar(100, 0, "run", True, TOKENS_PER_STEP)
    for r in blocks(2, 10, lambda b: TOKENS_PER_STEP / 0.2):
        bar.on_step(r)
    assert bar.bar.n == 20
    text = str(bar.bar)
    assert "0.20 s/step" in text and f"ETA {fmt_duration(80 * 0.2)}" in text and "loss 3.000" in text
    bar.on_end(None)


def test_a_slow_first_block_is_not_silent(caplog):
    """A run typed at the command line whose first train.flush_every steps take long says so once, with the
    step time they imply at least; rows arriving in time cancel that line."""
    import time

    caplog.set_level(logging.INFO, logger="normlab")
    slow = ProgressLog("run", 2000, 50, TOKENS_PER_STEP, hint=True, first_block=10, waiting_s=0.05)
    deadline = time.monotonic() + 10
    while not caplog.records and time.monotonic() < deadline:
        time.sleep(0.01)
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "training: the first 10 steps are under way (0 s so far: at least 5 ms"
    )
    slow.on_step(row(0, TOKENS_PER_STEP / 0.5))
    caplog.clear()
    quick = ProgressLog("run", 2000, 50, TOKENS_PER_STEP, hint=True, first_block=10, waiting_s=0.2)
    quick.on_step(row(0, TOKENS_PER_STEP / 0.01))
    time.sleep(0.3)
    assert not [r for r in caplog.records if "under way" in r.getMessage()]
    quiet = ProgressLog("run", 2000, 50, TOKENS_PER_STEP, hint=False, first_block=10, waiting_s=0.01)
    time.sleep(0.1)  # a sweep's job (no hint): no such line
    assert not [r for r in caplog.records if "under way" in r.getMessage()]
    quiet.on_end(None)
