"""The commands the README shows a new user: each says how long it takes, and that time holds — checked
against normlab's own cost model (normlab.study.cost: the step time of the presets' tiny models, calibrated on
2 idle cores), not by running them. A command that trains runs offline (`data=synthetic`) and is sized for a
CPU, or its line says it is not."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

from normlab.config.compose import compose_config
from normlab.study.cost import job_seconds, sweep_cost
from normlab.study.findings import CORE, FINDINGS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CORES = 2  # the laptop the README sizes its commands for
ANNOUNCED = re.compile(r"\((?:[^()]*?)(?:~(\d+(?:\.\d+)?) (min|s)|(seconds))\)\s*$")


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def command_lines(block_text: str) -> list[tuple[str, str]]:
    """(command, comment) for each command of the ```bash blocks in `block_text`, continued lines joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", block_text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            command, _, comment = line.partition("  #")
            out.append((command.strip(), comment.strip()))
    return out


def announced_seconds(comment: str) -> float | None:
    m = ANNOUNCED.search(comment)
    if m is None:
        return None
    if m.group(3):
        return 60.0  # "(seconds)": under a minute
    value, unit = float(m.group(1)), m.group(2)
    return value * 60 if unit == "min" else value


def expected_seconds(command: str) -> float | None:
    """The cost model's seconds on CORES idle cores for a train.py or reproduce.py command, None for the
    others (reading runs, printing help)."""
    argv = shlex.split(command)
    if argv[:2] == ["python", "train.py"] and "--help" not in argv:
        overrides = [a for a in argv[2:] if not a.startswith("-")]
        swept = [o.split("=", 1) for o in overrides if "," in o and not o.startswith("hydra")]
        fixed = [o for o in overrides if "," not in o or o.startswith("hydra")]
        jobs = [
            [f"{k}={v}" for (k, _), v in zip(swept, combo, strict=True)]
            for combo in itertools.product(*[vals.split(",") for _, vals in swept])
        ]
        seconds = sum(job_seconds(compose_config([*fixed, *job]), {}) for job in jobs)
        parallel = CORES if "hydra/launcher=joblib" in fixed else 1
        return seconds / parallel
    if argv[:2] == ["python", "scripts/reproduce.py"]:
        names = [a for a in argv[2:] if not a.startswith("-")] or (
            list(CORE) if "--core" in argv else list(FINDINGS)
        )
        total = 0.0
        for name in names:
            finding = FINDINGS[name]
            total += sweep_cost(finding.preset).core_s
            if "--no-perturb" not in argv and finding.perturbation is not None:
                total += sweep_cost(finding.preset, finding.perturbation.overrides).core_s
        return total / CORES
    return None


FIVE = command_lines(section(README.read_text(), "Five commands"))


def test_the_five_commands_are_all_there():
    assert len(FIVE) == 6
    assert [c.split()[1] for c, _ in FIVE].count("train.py") == 3


@pytest.mark.parametrize(("command", "comment"), FIVE, ids=[c[:60] for c, _ in FIVE])
def test_each_command_says_how_long_and_holds_to_it(command, comment):
    said = announced_seconds(comment)
    assert said is not None, f"{command!r}: its comment says no time ({comment!r})"
    expected = expected_seconds(command)
    if expected is not None:
        # the model's estimate (training alone) within the time announced, which adds start-up and
        # evaluation: a command resized without its announcement fails here
        assert expected <= said, f"{command!r}: about {expected:.0f} s expected, {said:.0f} s announced"
        assert expected >= said / 6, f"{command!r}: {said:.0f} s announced for {expected:.0f} s of work"
    if "train.py" in command and "--help" not in command:
        assert "data=synthetic" in command  # offline: no TinyStories download on a first try
        assert "model=tiny" in command


def test_the_default_size_is_named_as_hours_on_a_cpu():
    """The fast variant is offered in so many words, and the default's cost is said before anyone runs it."""
    text = " ".join(section(README.read_text(), "Five commands").split())
    assert "`model=tiny train.max_steps=300 data=synthetic` is the fast variant" in text
    assert "hours on 2 CPU cores" in text
    # and the default is indeed that slow: the cost model's single run at the defaults, over 30 min
    assert job_seconds(compose_config(["data=synthetic"]), {}) > 30 * 60


SCALING = ROOT / "docs" / "scaling.md"
SMALL = [  # the documented command sized down to seconds: fewer steps, two blocks, short windows
    "train.max_steps=3",
    "depth=2",
    "train.seq_len=32",
    "train.batch_size=8",
    "train.eval_batches=2",
    "train.eval_every=0",
    "warmup_steps=2",
    "train.sample_tokens=40",  # a sample long enough to span lines
    "data.n_train_stories=400",
    "data.n_val_stories=40",
    "data.vocab_size=512",
    "logger=none",
    "hydra.launcher.n_jobs=1",
]


@pytest.mark.slow  # eight stacked runs in a subprocess (~30 s on 2 idle cores)
def test_the_documented_stacked_sweep_runs_offline(tmp_path):
    """docs/scaling.md's stacked command, as written (sized down), with no network: every job completes,
    each under a name of its own that carries its learning rate, and every console line carries its
    prefix (a multi-line sample stays on one line)."""
    import os
    import subprocess
    import sys

    text = section(SCALING.read_text(), "When to stack: many small runs as one model")
    (command, _), *_ = command_lines(text)
    argv = shlex.split(command)
    assert argv[:3] == ["python", "train.py", "-m"] and "data=synthetic" in argv
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env["NORMLAB_CACHE_DIR"] = str(tmp_path / "cache")
    sweep = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, *argv[1:], *SMALL, f"hydra.sweep.dir={sweep}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    assert "TinyStories" not in said
    import json

    summaries = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert len(summaries) == 8 and {s["status"] for s in summaries} == {"completed"}
    names = [s["name"] for s in summaries]
    assert len(set(names)) == 8 and all(re.search(r"-s\d-lr0\.00[13]$", n) for n in names), names
    stray = [line for line in said.splitlines() if line.strip() and not line.startswith(("[", "  ", "\t"))]
    assert not stray, stray  # every line is a log line, a [sweep] line or an indented part of one
