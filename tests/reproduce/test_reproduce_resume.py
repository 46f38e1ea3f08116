"""scripts/reproduce.py keeps what it ran (issue 29, finding 9): Ctrl-C stops it in one line with the command
that continues, and running it again continues a finding's sweep instead of deleting it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normlab.study.findings import FINDINGS
from normlab.study.preset_sweep import run_preset
from normlab.study.reproduce import main

ROOT = Path(__file__).resolve().parents[2]


def stub_python(tmp_path: Path) -> Path:
    """A stand-in for `python -m normlab -m …` that records its arguments and exits 0."""
    stub = tmp_path / "python"
    stub.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv))\n"
    )
    stub.chmod(0o755)
    return stub


def test_running_a_finding_again_continues_its_sweep_and_deletes_nothing(tmp_path):
    out = tmp_path / "out"
    earlier = out / "sweeps" / "xiong_warmup" / "0_ln-post-L6-w0-s0"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text(json.dumps({"status": "completed", "steps": 300}))
    (earlier / "metrics.jsonl").write_text('{"step": 0, "loss": 5.0}\n')
    record = run_preset(FINDINGS["xiong_warmup"], out, ["seed=0"], python=str(stub_python(tmp_path)))
    assert record["rc"] == 0
    assert (earlier / "summary.json").is_file() and (earlier / "metrics.jsonl").is_file()  # kept
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert (
        "train.resume=auto" in argv
        and f"hydra.sweep.dir={(out / 'sweeps' / 'xiong_warmup').resolve()}" in argv
    )
    assert "train.resume" not in record["command"]  # the reproduction command shown in REPORT.md


def test_a_sweep_made_with_other_settings_is_refused_not_mixed(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    (out / "sweeps" / "xiong_warmup" / "0_a").mkdir(parents=True)
    timings = {
        "findings": {
            "xiong_warmup": {"command": "python train.py -m +experiment=findings/xiong_warmup seed=5"}
        }
    }
    (out / "timings.json").write_text(json.dumps({**timings, "sessions": []}))
    import normlab.study.reproduce as reproduce

    monkeypatch.setattr(reproduce, "build_report", lambda *a: (out / "REPORT.md", {}))
    rc = main(["xiong_warmup", "--no-perturb", "--out", str(out), "--override", "seed=0"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "holds this finding's sweep made with other settings" in err and "seed=5" in err
    assert (out / "sweeps" / "xiong_warmup" / "0_a").is_dir()


def test_ctrl_c_goes_to_the_sweep_once_and_ends_in_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C while a finding's sweep runs (the sweep here a stand-in that saves and exits 130 on SIGINT):
    the signal reaches it once, no traceback, one line with the command that continues, exit 130."""
    import functools
    import threading

    import normlab.study.reproduce as reproduce

    stub = tmp_path / "python"
    started, got = tmp_path / "started", tmp_path / "signals"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, signal, sys, time\n"
        f"got = pathlib.Path({str(got)!r})\n"
        "def handle(signum, frame):\n"
        "    got.write_text(got.read_text() + 'I' if got.exists() else 'I')\n"
        "signal.signal(signal.SIGINT, handle)\n"
        f"pathlib.Path({str(started)!r}).write_text('')\n"
        "deadline = time.monotonic() + 60\n"
        "while not got.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "time.sleep(0.5)  # saving: a second signal would show here\n"
        "sys.exit(130)\n"
    )
    stub.chmod(0o755)
    monkeypatch.setattr(reproduce, "run_preset", functools.partial(run_preset, python=str(stub)))

    def press_ctrl_c():
        while not started.exists():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    rc = main(["xiong_warmup", "--no-perturb", "--out", str(tmp_path / "out")])
    assert rc == 130 and got.read_text() == "I"  # passed on once
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "interrupted: stopped by SIGINT at finding 2 (xiong_warmup)"
    )
    assert (
        f"continue with: python scripts/reproduce.py xiong_warmup --no-perturb --out {tmp_path / 'out'}"
        in err
    )


@pytest.mark.slow
def test_ctrl_c_stops_in_one_line_and_the_printed_command_continues(tmp_path, tiny):
    """A real run of scripts/reproduce.py: SIGINT while its sweep's jobs train (the terminal's Ctrl-C reaches
    the script, which passes it to the sweep once), then the printed command, which finishes the finding
    with the interrupted jobs resumed and nothing trained before lost."""
    out = tmp_path / "out"
    keep = [o for o in tiny if not o.startswith(("warmup_steps", "train.max_steps", "train.eval_every"))]
    overrides = [
        a
        for o in [*keep, "seed=0", "train.max_steps=300", "hydra.launcher.n_jobs=2"]
        for a in ("--override", o)
    ]
    cmd = [
        sys.executable,
        "scripts/reproduce.py",
        "xiong_warmup",
        "--no-perturb",
        "--out",
        str(out),
        *overrides,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sweep = out / "sweeps" / "xiong_warmup"
    deadline = time.monotonic() + 240
    while not any(p.stat().st_size > 0 for p in sweep.glob("*/metrics.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: stopped by SIGINT at finding 2 (xiong_warmup)"), last
    continue_command = last.split("continue with: ", 1)[1]
    summaries = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    statuses = {name: s["status"] for name, s in summaries.items()}
    assert "interrupted" in statuses.values() and "running" not in statuses.values(), statuses
    assert any(s["status"] == "interrupted" and s["steps"] > 0 for s in summaries.values()), summaries
    assert continue_command.startswith("python scripts/reproduce.py xiong_warmup")
    again = subprocess.run(
        [sys.executable, *continue_command.split()[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    finished = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    assert len(finished) == 4 and all(
        s["status"] == "completed" and s["steps"] == 300 for s in finished.values()
    )
    for name, status in statuses.items():  # the interrupted jobs resumed, not started afresh
        # (a job the signal reached before its first step has nothing to resume: under load the second
        # job can still be starting when the first one's rows appear)
        if status == "interrupted" and summaries[name]["steps"] > 0:
            assert finished[name]["resumed_from"], name
    log = (out / "sweeps" / "xiong_warmup.log").read_text()
    assert "[sweep] continuing" in log


@pytest.mark.parametrize("signum", [signal.SIGTERM])
def test_a_signal_between_findings_starts_nothing_more(tmp_path, signum, monkeypatch, capsys):
    """A signal that comes while no sweep runs (between two findings) stops before the next one starts."""
    import normlab.study.reproduce as reproduce

    started = []

    def fake_run_finding(finding, out, args, timings, when, forward):
        started.append(finding.name)
        forward.handle(signum)  # as if it came just as this finding's sweep ended
        return {"rc": 0, "wall_s": 0.0}

    monkeypatch.setattr(reproduce, "run_finding", fake_run_finding)
    rc = main(["xiong_warmup", "rmsnorm_speed", "--no-perturb", "--out", str(tmp_path / "out")])
    assert rc == 128 + signum and started == ["xiong_warmup"]
    assert "continue with: python scripts/reproduce.py xiong_warmup rmsnorm_speed" in capsys.readouterr().err


def sleeping_python(tmp_path: Path, seconds: float) -> Path:
    """A stand-in for a preset's sweep that makes its sweep directory, sleeps `seconds` and exits 0."""
    stub = tmp_path / f"python_{seconds}"
    stub.write_text(
        f"#!{sys.executable}\nimport pathlib, sys, time\n"
        "sweep = [a.split('=', 1)[1] for a in sys.argv if a.startswith('hydra.sweep.dir=')][0]\n"
        "pathlib.Path(sweep).mkdir(parents=True, exist_ok=True)\n"
        f"time.sleep({seconds})\n"
    )
    stub.chmod(0o755)
    return stub


def test_a_continued_finding_reports_the_time_of_every_session_not_the_last_ones_few_seconds(
    tmp_path, monkeypatch
):
    """The report quotes a finding's wall time from timings.json: a second session (each stand-in
    sweep 0.3 s) adds its seconds to the first's (each 1 s), and the earlier start is kept."""
    import functools

    import normlab.study.reproduce as reproduce

    out = tmp_path / "out"
    monkeypatch.setattr(reproduce, "build_report", lambda *a: (out / "REPORT.md", {}))
    for seconds in (1.0, 0.3):
        monkeypatch.setattr(
            reproduce,
            "run_preset",
            functools.partial(run_preset, python=str(sleeping_python(tmp_path, seconds))),
        )
        assert main(["xiong_warmup", "--out", str(out)]) == 0
        timings = json.loads((out / "timings.json").read_text())
        if seconds == 1.0:
            first = timings["findings"]["xiong_warmup"]
    record = timings["findings"]["xiong_warmup"]
    assert first["wall_s"] >= 2.0 and "sessions" not in first  # the preset and its perturbed sweep
    second_s = [s["wall_s"] for s in timings["sessions"]][1]
    assert record["sessions"] == 2 and record["started"] == first["started"]
    # the second session's two sweeps took at least 0.3 s each: added to the first's
    assert first["wall_s"] + 0.6 <= record["wall_s"] <= first["wall_s"] + second_s + 0.2
    assert record["perturbed"]["wall_s"] >= first["perturbed"]["wall_s"] + 0.3 >= 1.3
    assert record["perturbed"]["wall_s"] < record["wall_s"]
    assert timings["unfinished"] == {}


def test_the_seconds_of_a_session_killed_mid_sweep_count_when_the_finding_is_finished(tmp_path, monkeypatch):
    """A session killed outright (SIGKILL: no handler runs) while a sweep runs: the seconds it spent are in
    timings.json (saved every TICK_S while the sweep runs) and the session that finishes the finding adds
    them, counting both sessions."""
    import functools

    import normlab.study.reproduce as reproduce

    out = tmp_path / "out"
    slow = sleeping_python(tmp_path, 30.0)
    driver = (
        "import functools, sys\n"
        "import normlab.study.preset_sweep as p\n"
        "import normlab.study.reproduce as r\n"
        f"r.run_preset = functools.partial(p.run_preset, python={str(slow)!r})\n"
        "p.TICK_S = 0.05\n"
        f"r.main(['xiong_warmup', '--no-perturb', '--out', {str(out)!r}])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", driver], env=env)
    path, spent = out / "timings.json", 0.0
    deadline = time.monotonic() + 120
    while spent < 1.0:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
        with contextlib.suppress(ValueError, OSError):  # read while it is being written
            spent = (
                json.loads(path.read_text()).get("unfinished", {}).get("xiong_warmup", {}).get("wall_s", 0.0)
            )
    proc.kill()
    proc.wait()
    killed = json.loads(path.read_text())
    assert "xiong_warmup" not in killed["findings"] and killed["unfinished"]["xiong_warmup"]["sessions"] == 1
    lost = killed["unfinished"]["xiong_warmup"]["wall_s"]
    monkeypatch.setattr(reproduce, "build_report", lambda *a: (out / "REPORT.md", {}))
    monkeypatch.setattr(
        reproduce, "run_preset", functools.partial(run_preset, python=str(sleeping_python(tmp_path, 0.0)))
    )
    assert main(["xiong_warmup", "--no-perturb", "--out", str(out)]) == 0
    timings = json.loads(path.read_text())
    record = timings["findings"]["xiong_warmup"]
    assert (
        record["sessions"] == 2 and lost <= record["wall_s"] <= lost + timings["sessions"][0]["wall_s"] + 0.2
    )
    assert timings["unfinished"] == {}
