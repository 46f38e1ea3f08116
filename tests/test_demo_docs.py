"""The shipped demo (docs/demo/, docs/demo.md) against scripts/demo.sh: same settings, same numbers.

`bash scripts/demo.sh --docs` regenerates docs/demo/ from the demo's sweep. These tests read the settings
recorded in the shipped runs.csv and fail when demo.sh's overrides have changed since (rerun `bash
scripts/demo.sh --docs`), check that the numbers and sentences the pages quote are the shipped report's,
and that the demo keeps its promise: at least one tested difference, no two runs of the same network.
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEMO_SH = ROOT / "scripts" / "demo.sh"
DEMO_DIR = ROOT / "docs" / "demo"
REGENERATE = "rerun `bash scripts/demo.sh --docs` and check docs/demo.md's sentences"


def bash_array(name: str) -> list[str]:
    m = re.search(rf"^{name}=\(([^)]*)\)", DEMO_SH.read_text(), re.MULTILINE)
    assert m, f"scripts/demo.sh has no {name}=(...) array"
    return shlex.split(m.group(1))


def recorded(runs: pd.DataFrame, key: str) -> pd.Series:
    """The column of runs.csv holding an override's value: the key itself, or a group's `name`."""
    for column in (key, f"{key}.name"):
        if column in runs.columns:
            return runs[column]
    raise AssertionError(f"runs.csv records no {key} (nor {key}.name)")


def same(value: object, typed: str) -> bool:
    try:
        return math.isclose(float(value), float(typed))
    except (TypeError, ValueError):
        return str(value).lower() == typed.lower()  # booleans: pandas reads True, demo.sh types true


def disagreements(runs: pd.DataFrame, settings: list[str], axes: list[str]) -> list[str]:
    """Each override of demo.sh that the runs were not made with, in one line."""
    problems = []
    for override in settings:
        key, value = override.split("=", 1)
        if key.startswith("hydra"):  # where and how the jobs ran, not what they trained
            continue
        bad = sorted({str(v) for v in recorded(runs, key) if not same(v, value)})
        if bad:
            problems.append(f"{key}: demo.sh says {value}, the shipped runs have {', '.join(bad)}")
    cells = []
    for axis in axes:
        key, values = axis.split("=", 1)
        levels = values.split(",")
        cells.append(levels)
        have = {str(v) for v in recorded(runs, key)}
        if have != set(levels):
            problems.append(f"{key}: demo.sh sweeps {sorted(levels)}, the shipped runs have {sorted(have)}")
    n = len(list(itertools.product(*cells)))
    if len(runs) != n:
        problems.append(f"demo.sh makes {n} runs, the shipped report has {len(runs)}")
    return problems


def test_shipped_demo_was_made_with_demo_sh_settings() -> None:
    runs = pd.read_csv(DEMO_DIR / "runs.csv")
    assert disagreements(runs, bash_array("settings"), bash_array("variants")) == [], REGENERATE
    assert set(runs["status"]) == {"completed"} and runs["learned"].all(), "a demo run that did not learn"


def test_a_changed_setting_is_caught() -> None:
    runs = pd.read_csv(DEMO_DIR / "runs.csv")
    settings = [s.replace("train.max_steps=200", "train.max_steps=300") for s in bash_array("settings")]
    assert disagreements(runs, settings, bash_array("variants")) == [
        "train.max_steps: demo.sh says 300, the shipped runs have 200"
    ]
    assert disagreements(runs, bash_array("settings"), ["placement=pre,post", "seed=0,1"]) == [
        "seed: demo.sh sweeps ['0', '1'], the shipped runs have ['0', '1', '2']",
        "demo.sh makes 4 runs, the shipped report has 6",
    ]


def test_demo_sh_counts_its_runs() -> None:
    runs = int(re.search(r"^runs=(\d+)$", DEMO_SH.read_text(), re.MULTILINE).group(1))
    cells = [axis.split("=", 1)[1].split(",") for axis in bash_array("variants")]
    assert runs == len(list(itertools.product(*cells)))  # the time estimate it prints counts on it


def test_the_demo_page_quotes_the_shipped_numbers() -> None:
    """docs/demo.md's results table: each variant's numbers as in docs/demo/summary.csv."""
    summary = pd.read_csv(DEMO_DIR / "summary.csv").set_index("variant")
    page = (ROOT / "docs" / "demo.md").read_text()
    rows = re.findall(
        r"^\| `([^`]+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (yes|no) \| (\d+) \|$", page, re.M
    )
    assert {variant for variant, *_ in rows} == set(summary.index), REGENERATE
    for variant, final, best, baseline, learned, spikes in rows:
        shipped = summary.loc[variant]
        assert final == f"{shipped['final_val_loss_mean']:.3f}", (variant, REGENERATE)
        assert best == f"{shipped['best_val_loss_mean']:.3f}", (variant, REGENERATE)
        assert baseline == f"{shipped['baseline_unigram_loss']:.3f}", (variant, REGENERATE)
        assert (learned == "yes") == (shipped["learned"] == shipped["runs"]), (variant, REGENERATE)
        assert int(spikes) == shipped["n_spikes_total"], (variant, REGENERATE)


def test_the_demo_has_a_tested_difference_and_no_duplicated_network() -> None:
    """What the demo promises: some effect row of its report is tested ("worse"/"better", with its
    interval), and no two variants are one network (norm=none under two placements would be)."""
    report = (DEMO_DIR / "report.md").read_text()
    effects = report.split("## Effects")[1].split("## Figures")[0]
    rows = [line for line in effects.splitlines() if line.startswith("| ") and not line.startswith("| key")]
    tested = [r for r in rows if r.rstrip(" |").endswith(("worse", "better"))]
    assert tested, "the demo's report tests no difference: " + REGENERATE
    assert all("[" in r and "]" in r for r in tested)  # each with its interval
    runs = pd.read_csv(DEMO_DIR / "runs.csv")
    assert "none" not in set(recorded(runs, "norm")), "norm=none is one network under every placement"


def test_the_quoted_sentences_are_the_shipped_reports() -> None:
    """docs/comparing.md quotes the demo's placement sentence, docs/demo.md the sentence under each figure,
    word for word from docs/demo/report.md."""
    report = " ".join((DEMO_DIR / "report.md").read_text().split())
    quote = re.search(r'reads "(\*\*placement\*\*[^"]+)"', (ROOT / "docs" / "comparing.md").read_text())
    assert quote, "docs/comparing.md no longer quotes the demo's placement sentence"
    assert " ".join(quote.group(1).split()) in report, REGENERATE
    page = (ROOT / "docs" / "demo.md").read_text()
    captions = re.findall(r"^> (.+)$", page, re.M)
    assert len(captions) >= 8, "docs/demo.md quotes the report's sentence under each figure as a > line"
    for caption in captions:
        assert " ".join(caption.split()) in report, (caption[:80], REGENERATE)
