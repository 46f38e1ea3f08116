"""The report's generated sentences on crafted runs: effects with Welch–t intervals checked against
hand-computed values and scipy's own Welch test, a null effect that must read "no clear difference",
n = 1 (warning, no intervals), runs that did not learn, identical variants; and report.html."""

from __future__ import annotations

import base64
import math
import re
from html.parser import HTMLParser

import pytest
from scipy import stats as sps

from normlab.analysis import load_runs, write_report
from normlab.analysis.estimate import difference, fmt_ci
from normlab.analysis.narrative import (
    LEVEL,
    contrast_rows,
    contrast_sentences,
    contrasts,
    report_sentences,
    summary_sentences,
    warnings,
)


def test_welch_interval_against_hand_computed_values():
    # equal n and variances: se = sqrt(1/3 + 1/3), df = 2(n − 1) = 4, t_0.975,4 = 2.776445 (t table)
    d = difference([1.0, 2.0, 3.0], [3.0, 4.0, 5.0])
    assert d.value == -2.0 and d.df == pytest.approx(4.0)
    half = 2.776445 * math.sqrt(2 / 3)
    assert d.ci(LEVEL) == (pytest.approx(-2 - half, abs=1e-5), pytest.approx(-2 + half, abs=1e-5))
    # unequal variances: Welch–Satterthwaite df by hand
    a, b = [2.0, 2.1, 1.9, 2.05], [3.0, 4.0, 2.5]
    va, vb = (0.021875 / 3) / 4, (1.1666666667 / 2) / 3  # sample variances / n
    d = difference(a, b)
    assert d.df == pytest.approx((va + vb) ** 2 / (va**2 / 3 + vb**2 / 2), rel=1e-6)
    assert d.ci(LEVEL) == pytest.approx(tuple(sps.ttest_ind(a, b, equal_var=False).confidence_interval()))
    # n = 1 on a side, or no spread at all: no noise estimate, no interval
    assert not difference([1.0], [2.0, 2.1]).has_noise and fmt_ci(difference([1.0], [2.0, 2.1]), LEVEL) == ""
    assert not difference([1.0, 1.0], [1.0, 1.0]).has_noise


def three_seed_sweep(fab, root, post_values, pre_values, summary_extra=None):
    specs = []
    for placement, values in (("pre", pre_values), ("post", post_values)):
        for seed, v in enumerate(values):
            extra = (summary_extra or {}).get(placement)
            specs.append(
                fab.spec("ln", placement, seed, final_val=v, best_val=v, final_train=v, summary_extra=extra)
            )
    return load_runs(fab.write_sweep(root, specs))


PRE = [2.50, 2.52, 2.48]
POST = [2.70, 2.73, 2.69]


def test_a_clear_effect_reads_worse_with_its_interval(fab, tmp_path):
    rs = three_seed_sweep(fab, tmp_path / "s", POST, PRE)
    (c,) = contrasts(rs)
    ref = sps.ttest_ind(POST, PRE, equal_var=False).confidence_interval()
    assert c.est.value == pytest.approx(sum(POST) / 3 - sum(PRE) / 3)
    (sentence,) = contrast_sentences([c], rs)
    expected = (
        f"**placement** — post − pre: +{sum(POST) / 3 - sum(PRE) / 3:.3f} nats "
        f"(post worse: CI [+{ref.low:.3f}, +{ref.high:.3f}], n = 3 vs 3)."
    )
    assert sentence == expected
    assert contrast_rows([c], rs)[0][3:] == [
        f"+{sum(POST) / 3 - sum(PRE) / 3:.3f}",
        f"[+{ref.low:.3f}, +{ref.high:.3f}]",
        "3 vs 3",
        "worse",
    ]
    # the report states its level once: the 95 % of scipy's interval above
    report = write_report(rs, tmp_path / "r", figures=["loss"]).path.read_text()
    assert report.count("two-sided 95 % confidence interval") == 1 and "| 95 % CI |" in report
    first = summary_sentences(rs)[0]
    assert first.startswith(
        "Lowest final validation loss: **pre**, 2.500 nats/token (n = 3)"
    )  # only placement varies
    assert "clearly ahead" in first
    assert warnings(rs) == []


def test_a_null_effect_reads_no_clear_difference(fab, tmp_path):
    """Two variants drawn from the same distribution: the check must not call either one worse."""
    same_a, same_b = [2.50, 2.58, 2.46], [2.53, 2.47, 2.55]
    rs = three_seed_sweep(fab, tmp_path / "s", same_b, same_a)
    (c,) = contrasts(rs)
    assert not c.resolved and c.interval[0] < 0 < c.interval[1]
    (sentence,) = contrast_sentences([c], rs)
    assert sentence.startswith("**placement** — post − pre: ") and "(no clear difference: CI [" in sentence
    assert contrast_rows([c], rs)[0][-1] == "no clear difference"
    assert "not separated" in summary_sentences(rs)[0]
    assert "**" not in summary_sentences(rs)[0]  # no bold winner without a test that separates it


def test_one_run_per_variant_warns_and_gives_no_interval(fab, tmp_path):
    rs = three_seed_sweep(fab, tmp_path / "s", [2.7], [2.5])
    (warning,) = warnings(rs)
    assert warning.startswith("Every variant has a single run (n = 1)")
    (sentence,) = contrast_sentences(contrasts(rs), rs)
    assert sentence == (
        "**placement** — post − pre: +0.200 nats (untested: one run on each side, no noise estimate)."
    )
    (first,) = summary_sentences(rs)
    assert first == (
        "Lowest final validation loss: pre, 2.500 nats/token (n = 1); the next, post: post − pre = +0.200 nats "
        "(untested: n = 1 vs 1, no noise estimate)."
    )
    assert contrast_rows(contrasts(rs), rs)[0][4:] == ["–", "1 vs 1", "untested (n = 1)"]
    report = write_report(rs, tmp_path / "r", figures=["loss"]).path.read_text()
    assert "> - ⚠ Every variant has a single run (n = 1)" in report
    assert "One run per variant (seed 0): numbers are single runs, figures have no bands." in report
    assert "95 % CI" not in report.split("## Effects")[1].split("|")[0]


def test_runs_that_did_not_learn_are_named(fab, tmp_path):
    baseline = 2.65
    extra = {
        "pre": {"baseline_unigram_loss": baseline, "learned": True},
        "post": {"baseline_unigram_loss": baseline, "learned": False},
    }
    rs = three_seed_sweep(fab, tmp_path / "s", POST, PRE, extra)
    warning, *causes = warnings(rs)
    assert warning.startswith("3 run(s) did not learn")
    assert "lower the learning rate" not in " ".join(warnings(rs))  # no remedy its numbers do not support
    # one line for the variant: its three runs share the cause the rules find in their config and losses
    (cause,) = causes
    assert cause.startswith("Likely cause, from the run's own config and losses — `post` (3 of 3 runs): ")
    assert f"unigram baseline ({baseline:.3f} nats/token): post (3 of 3)." in warning
    (sentence,) = contrast_sentences(contrasts(rs), rs)
    assert sentence.startswith("**placement** — post (did not learn) − pre: ")
    assert "Highest" not in " ".join(summary_sentences(rs))  # two variants: one sentence
    report = write_report(rs, tmp_path / "r", figures=["loss"]).path.read_text()
    header = next(line for line in report.splitlines() if line.startswith("| variant |"))
    assert "| unigram baseline | learned |" in header
    assert "| post | 3 |" in report and "**0/3** ⚠" in report and "| 3/3 |" in report
    # without the fields (older runs) the columns are left out
    old = write_report(three_seed_sweep(fab, tmp_path / "o", POST, PRE), tmp_path / "r2", figures=["loss"])
    assert "unigram baseline |" not in old.path.read_text()


def test_identical_variants_read_identical(fab, tmp_path):
    specs = [
        fab.spec("none", p, s, final_val=4.1 + 0.01 * s, best_val=4.1, final_train=4.1)
        for p in ("pre", "post")
        for s in (0, 1)
    ]
    rs = load_runs(fab.write_sweep(tmp_path / "s", specs))
    (sentence,) = contrast_sentences(contrasts(rs), rs)
    assert sentence == "**placement** — post − pre: identical."
    assert "; post is identical to it." in summary_sentences(rs)[0]


def test_effects_hold_other_keys_fixed(sweep):
    """MAIN: ln × pre/post, 2 seeds, one post run diverged → n = 2 vs 1, no interval, named per key."""
    rs = load_runs(sweep.path)
    (c,) = contrasts(rs)
    assert (c.key, c.level, c.reference, c.within) == ("placement.name", "post", "pre", {"norm.name": "ln"})
    assert (c.n_a, c.n_b) == (1, 2) and c.single and not c.tested
    assert any(w.startswith("Runs diverged in ln, post (1 of 2)") for w in warnings(rs))


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href")]


def test_html_report_is_one_self_contained_file(sweep, tmp_path):
    rs = load_runs(sweep.path)
    rep = write_report(rs, tmp_path, figures=["loss", "grad_norm"])
    page = rep.html.read_text()
    parser = _Collect()
    parser.feed(page)
    assert not parser.tags & {"script", "link", "iframe"}
    assert parser.refs and all(v.startswith("data:") for _, _, v in parser.refs)  # nothing fetched
    images = [v for tag, _, v in parser.refs if tag == "img"]
    assert len(images) == 2
    for uri, name in zip(images, ("loss.png", "grad_norm.png"), strict=True):
        assert base64.b64decode(uri.split(",", 1)[1]) == (tmp_path / name).read_bytes()
    # the CSVs travel inside the page too, as downloads
    assert [v.split(";")[0] for tag, _, v in parser.refs if tag == "a"] == ["data:text/csv"] * 2
    # the same text as report.md: its sentences and tables
    assert "<h2>Effects</h2>" in page and "<table>" in page
    assert re.search(r"<td>ln, pre</td>\s*<td>2</td>", page)


DIRECTION = re.compile(r"\b(worse|better|higher|lower|above|below|ahead|behind)\b")


def agreement_sweep(fab, root):
    """norm (ln, rms, none, bn) × placement (pre, post) with crafted final val losses: every reading
    appears — resolved (ln-post vs ln-pre), within noise (rms), one run (none), no spread (bn), identical
    (none: post equals pre)."""
    values = {
        ("ln", "pre"): [2.50, 2.52, 2.48],
        ("ln", "post"): [2.70, 2.73, 2.69],  # worse than ln-pre, clearly
        ("rms", "pre"): [2.53, 2.47, 2.55],  # rms − ln: within noise
        ("rms", "post"): [2.66, 2.80, 2.71],
        ("none", "pre"): [4.10],  # n = 1
        ("none", "post"): [4.10],  # identical to none-pre
        ("bn", "pre"): [3.00, 3.00],  # no spread at all: bn-post − bn-pre has no noise estimate
        ("bn", "post"): [3.20, 3.20],
    }
    specs = [
        fab.spec(norm, placement, seed, final_val=v, best_val=v, final_train=v)
        for (norm, placement), vs in values.items()
        for seed, v in enumerate(vs)
    ]
    return load_runs(fab.write_sweep(root, specs))


def test_sentences_and_tables_agree_and_never_overstate(fab, tmp_path):
    rs = agreement_sweep(fab, tmp_path / "s")
    cs = contrasts(rs)
    readings = {}
    for c in cs:  # each comparison on its own: the sentence says what its table row reads, no more
        (sentence,) = contrast_sentences([c], rs)
        (row,) = contrast_rows([c], rs)
        (lo, hi), text = c.interval, row[-1]
        readings[(c.key, c.level, tuple(c.within.values()))] = text
        if text in ("worse", "better"):
            assert lo > 0 or hi < 0  # the interval excludes 0
            assert f"({c.level} {text}: CI [" in sentence and DIRECTION.findall(sentence) == [text], sentence
            assert f"{c.est.value:+.3f} nats" in sentence  # the sign of the interval: level − reference
        else:
            assert not DIRECTION.search(sentence), sentence
        if text.startswith("untested"):
            assert "untested" in sentence and f"{c.est.value:+.3f}" in sentence
            assert row[4] == "–"  # no interval in the table either
        if text == "no clear difference":
            assert lo < 0 < hi and sentence.count("no clear difference") == 1
        if text == "identical":
            assert "identical" in sentence
    assert readings[("placement.name", "post", ("ln",))] == "worse"
    assert readings[("norm.name", "rms", ("pre",))] == "no clear difference"
    assert readings[("norm.name", "none", ("pre",))] == "untested (n = 1)"
    assert readings[("placement.name", "post", ("none",))] == "identical"
    assert readings[("norm.name", "bn", ("pre",))] == "worse"  # ln's spread is a noise estimate (Welch)
    assert readings[("placement.name", "post", ("bn",))] == "untested (no spread)"
    # the whole report: its Effects sentences say "worse" / "better" exactly as often as its table rows do
    report = write_report(rs, tmp_path / "r", figures=["loss"]).path.read_text()
    effects = report.split("## Effects")[1].split("## Figures")[0]
    prose, table = effects.split("| key |")[0], effects.split("| key |")[1].split("\n\n")[0]
    table_readings = [line.split("|")[-2].strip() for line in table.splitlines()[2:]]
    assert table_readings.count("worse") >= 2 and table_readings.count("no clear difference") == 2
    for word in ("worse", "better", "no clear difference"):
        assert len(re.findall(rf"\b{word}\b", prose)) == table_readings.count(word), word
    assert "untested: n = 1 vs 3, no noise estimate" in prose  # none − ln with placement=pre
    # the summary: ln-pre lowest, rms-pre next within noise, none highest with one run: no direction
    summary = " ".join(summary_sentences(rs))
    assert "within noise" in summary and "untested: n = 1 vs 3" in summary
    assert not DIRECTION.search(summary.replace("clearly above the best", "")), summary


def test_single_runs_state_no_direction_anywhere(fab, tmp_path):
    """The demo's shape: ln / rms / none × pre / post, one seed each."""
    values = {("ln", "pre"): 3.105, ("ln", "post"): 3.244, ("rms", "pre"): 3.114, ("rms", "post"): 3.274}
    values |= {("none", "pre"): 4.880, ("none", "post"): 4.880}
    specs = [fab.spec(n, p, 0, final_val=v, best_val=v, final_train=v) for (n, p), v in values.items()]
    rs = load_runs(fab.write_sweep(tmp_path / "s", specs))
    said = report_sentences(rs)
    for sentence in said["summary"] + said["effects"]:
        assert not DIRECTION.search(sentence), sentence
    rows = contrast_rows(contrasts(rs), rs)
    assert {r[-1] for r in rows} == {"untested (n = 1)", "identical"}
    norm, placement = said["effects"]
    assert norm.startswith(
        "**norm** — rms − ln: +0.009 nats with placement=pre, +0.030 nats with placement=post;"
    )
    assert norm.endswith("(untested: one run on each side, no noise estimate).")
    assert "identical with norm=none" in placement
