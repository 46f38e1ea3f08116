"""The sweep progress line: job count as Hydra's basic sweeper expands a sweep, and the ETA arithmetic."""

from omegaconf import OmegaConf

from normlab.sweep_progress import count_jobs, progress_line

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def config(task: list[str], params: dict | None = None, target: str = BASIC):
    return OmegaConf.create(
        {"hydra": {"sweeper": {"_target_": target, "params": params}, "overrides": {"task": task}}}
    )


def test_counts_the_product_of_swept_values():
    assert count_jobs(config(["norm=ln,rms,none", "placement=pre,post", "depth=6"])) == 6
    assert count_jobs(config(["seed=range(0,4)"])) == 4


def test_preset_params_and_command_line_combine_and_the_command_line_wins():
    params = {"placement": "pre,post", "warmup_steps": "0,100", "seed": "0,1,2"}
    assert count_jobs(config([], params)) == 12
    assert count_jobs(config(["seed=0,1"], params)) == 8  # seed overridden: 2 values instead of 3


def test_the_sweep_records_its_jobs_overrides():
    """What a report on the sweep reads to name the jobs without a run directory (issue 40, point 2)."""
    from normlab.sweep_progress import sweep_jobs

    assert sweep_jobs(config(["norm=ln,rms", "seed=0"])) == [["norm=ln", "seed=0"], ["norm=rms", "seed=0"]]


def test_other_sweepers_have_no_total():
    assert count_jobs(config(["optim.lr=0.1,0.2"], target="hydra_plugins.optuna.OptunaSweeper")) is None


def test_progress_line():
    assert progress_line(2, 6, "ln-pre completed", 60.0) == (
        "[sweep] 2/6 done · ln-pre completed · 60 s elapsed, about 2.0 min left"
    )
    assert progress_line(6, 6, "x completed", 300.0).endswith("5.0 min elapsed, all done")
    assert progress_line(3, None, "x failed", 10.0) == "[sweep] 3 done · x failed · 10 s elapsed"


def test_one_sweep_line_for_the_jobs_running_side_by_side(tmp_path):
    """sweeps.live: each running job's step and loss from the tail of its metrics.jsonl, its length from its
    config, and the time left scaled by the work left."""
    import io
    import json

    from normlab.sweeps.jobs import Job
    from normlab.sweeps.live import SweepTicker

    for num, name, step, loss in ((2, "rms-pre", 119, 3.412), (3, "rms-post", 49, 3.9)):
        run = tmp_path / f"{num}_{name}"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text("train:\n  max_steps: 200\n")
        rows = [{"step": s, "loss": loss + 0.01 * (step - s)} for s in range(step + 1)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 12')
    (tmp_path / "4_ln-pre").mkdir()  # started: no row yet
    out = io.StringIO()
    ticker = SweepTicker(tmp_path, total=6, every_s=30, out=out)
    running = {n: Job(n, []) for n in (2, 3, 4)}
    assert ticker.tick(running, done=2, now=ticker.started + 10) is None  # not due yet
    line = ticker.tick(running, done=2, now=ticker.started + 60)
    # done work: 2 jobs + 120/200 + 50/200 = 2.85 of 6 → 60 s × 3.15 / 2.85 = 66 s left
    assert line == (
        "[sweep] running: #2 rms-pre 120/200 (loss 3.41), #3 rms-post 50/200 (loss 3.90), #4 ln-pre starting · "
        "2/6 done · 60 s elapsed, about 66 s left"
    )
    assert out.getvalue() == line + "\n"


def test_the_progress_lines_never_pass_their_totals(tmp_path):
    """A job whose last row is its final evaluation (step = max_steps) read "151/150" (issue 39, point 10),
    and a job's ending recorded twice counted twice."""
    import io
    import json

    from normlab.sweep_progress import DONE_FILE
    from normlab.sweeps.jobs import Job
    from normlab.sweeps.live import SweepTicker

    run = tmp_path / "0_ln-pre"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("train:\n  max_steps: 150\n")
    rows = [{"step": s, "loss": 3.0} for s in range(150)] + [{"step": 150, "val_loss": 3.1}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ticker = SweepTicker(tmp_path, total=2, every_s=30, out=io.StringIO())
    line = ticker.tick({0: Job(0, [])}, done=3, now=ticker.started + 60)
    assert line is not None and "#0 ln-pre 150/150" in line and "2/2 done" in line

    from normlab.sweep_progress import done_count

    (tmp_path / DONE_FILE).write_text("0\n1\n1\n")  # job 1's ending recorded twice
    assert done_count(tmp_path, total=3) == 2 and done_count(tmp_path, total=1) == 1


def test_the_time_left_counts_running_jobs_by_their_share_and_not_skipped_ones():
    from normlab.sweep_progress import time_left

    # 6 jobs, 1 done and two at 90 % after 40 s: 2.8 done in 40 s, 3.2 left → 46 s (not 40 × 5 / 1 = 200 s)
    assert time_left(40.0, 6, 1, 0, [0.9, 0.9]) == 40.0 * 3.2 / 2.8
    # a continued sweep: 3 jobs skipped (finished earlier) are done, but none of this invocation's work
    assert time_left(30.0, 6, 4, 3, [0.5]) == 30.0 * 1.5 / 1.5
    assert time_left(5.0, 6, 3, 3, []) is None  # nothing done yet in this invocation: no estimate
    assert time_left(30.0, 6, 0, 0, [0.1, 0.1]) is None  # start-up would dominate: none until a job's worth
    assert time_left(5.0, None, 1, 0, []) is None


def test_a_stopped_sweep_gives_no_time_left():
    line = progress_line(2, 6, "ln-pre-L6-w100-s1 interrupted", 60.0, stopping=True)
    assert line == "[sweep] 2/6 done · ln-pre-L6-w100-s1 interrupted · 60 s elapsed; the sweep is stopping"
    assert "left" not in line


def _job(root, num, name, last_step, status=None, max_steps=200):
    import json

    run = root / f"{num}_{name}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"train:\n  max_steps: {max_steps}\n")
    rows = [{"step": s, "loss": 3.0} for s in range(last_step + 1)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if status:
        (run / "summary.json").write_text(json.dumps({"status": status}))
    return run


def test_the_sweep_line_agrees_with_the_jobs_lines_and_never_runs_past_the_end(tmp_path):
    """The parent's line after a job ended: that job is not listed as running (its process may be exiting),
    no job shows more steps than it has (the final evaluation's row is at step max_steps), the jobs done
    are the done-file's (as the jobs' own lines count them), and after a stop no time left is given."""
    import io

    from normlab.sweep_progress import DONE_FILE
    from normlab.sweeps.jobs import Job
    from normlab.sweeps.live import SweepTicker

    _job(tmp_path, 4, "ln-post-s1", 200, "completed")  # its last row: the final evaluation, step 200
    _job(tmp_path, 5, "ln-post-s2", 200, "running")  # finished training, summary not written yet
    (tmp_path / DONE_FILE).write_text("0\n1\n2\n3\n4\n")
    out = io.StringIO()
    ticker = SweepTicker(tmp_path, total=6, every_s=30, out=out)
    running = {n: Job(n, []) for n in (4, 5)}
    line = ticker.line(running, done=4, elapsed=120.0)
    assert (
        line
        == "[sweep] running: #5 ln-post-s2 200/200 (loss 3.00) · 5/6 done · 2.0 min elapsed, about 0 s left"
    )
    assert "#4" not in line and "201/200" not in line
    (tmp_path / "5_ln-post-s2" / "summary.json").write_text('{"status": "completed"}')
    assert ticker.line(running, done=4, elapsed=121.0) is None  # every job ended: nothing after "all done"
    _job(tmp_path, 6, "ln-pre-s0", 49, "running")
    stopping = ticker.line({6: Job(6, [])}, done=4, elapsed=130.0, stopping=True)
    assert (
        stopping == "[sweep] stopping, saving: #6 ln-pre-s0 50/200 (loss 3.00) · 5/6 done · 2.2 min elapsed"
    )


def test_a_reason_many_jobs_share_is_said_once(tmp_path):
    """A missing corpus fails every job of a sweep the same way: the first job says it, the others point to
    it, and the sweep's end lists them on one line."""
    from normlab.sweep_progress import first_with
    from normlab.sweeps.ending import JobEnding, grouped_lines, job_numbers
    from normlab.sweeps.jobs import Job

    missing = "Cannot download TinyStories (no network connection, …); train on data=synthetic."
    assert first_with(tmp_path, missing, 0) is None  # the first to fail for it: it prints the error
    assert first_with(tmp_path, missing, 1) == "0"  # another job, the same process (a stack's member)
    assert first_with(tmp_path, "Another reason.", 2) is None
    assert job_numbers([0, 1, 2, 3, 5, 7, 8]) == "#0–#3, #5, #7, #8"
    endings = [JobEnding(Job(n, [], f"seed={n}"), "failed", f"failed: {missing}") for n in range(8)]
    endings.append(JobEnding(Job(8, [], "seed=8"), "completed", "completed (3 steps)"))
    assert grouped_lines(endings) == [
        f"  #0–#7 (8 jobs) — failed: {missing}",
        "  #8 seed=8 — completed (3 steps)",
    ]
