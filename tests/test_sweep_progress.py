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
