"""The README and the documentation site: every relative link and anchor resolves, every page is in the nav.

`mkdocs build --strict` (run by .ci/run after the tests) checks the built site the same way; this test does
it in a fraction of a second without MkDocs, and also covers README.md and ARCHITECTURE.md, which the site
does not build. Anchors follow GitHub's rule, which mkdocs.yml sets for the site too (pymdownx.slugs, lower
case), so one link works on both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 250  # issue 22: a README a newcomer reads in five minutes

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$')


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"`|\*\*|\*", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"\s", "-", text)


def expand_snippets(text: str) -> str:
    """The page as the site renders it: `--8<-- "FILE"` and `--8<-- "FILE:SECTION"` lines replaced."""
    out = []
    for line in text.splitlines():
        m = SNIPPET.match(line.strip())
        if not m:
            out.append(line)
            continue
        source = (ROOT / m.group(1)).read_text()
        if m.group(2):
            start, end = f"--8<-- [start:{m.group(2)}]", f"--8<-- [end:{m.group(2)}]"
            assert start in source and end in source, f"{m.group(1)} has no snippet section {m.group(2)!r}"
            source = source.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0].rsplit("\n", 1)[0]
        out.append(source)
    return "\n".join(out)


def prose_lines(text: str) -> list[str]:
    """Lines outside fenced code blocks, inline code removed (a link in code is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "``", line))
    return lines


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(expand_snippets(path.read_text())):
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            slug = github_slug(m.group(1))
            n, unique = 0, slug
            while unique in found:  # GitHub numbers repeated headings: x, x-1, x-2
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]


def broken_links(path: Path) -> list[str]:
    problems = []
    for line in prose_lines(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{target}: no heading with that anchor")
    return problems


def test_github_slug_matches_hand_written_anchors() -> None:
    # GitHub's anchors for headings of these pages, as GitHub writes them
    assert github_slug("Weights & Biases") == "weights--biases"
    assert github_slug("Sweeps: stop, resume, finish") == "sweeps-stop-resume-finish"
    assert (
        github_slug("`data=synthetic`: the embedded corpus (offline)")
        == "datasynthetic-the-embedded-corpus-offline"
    )
    assert github_slug("SLURM × torchrun") == "slurm--torchrun"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-section) [ok](#page) `[in code](nowhere.md)`\n"
        "[gone](missing.md) [no anchor](other.md#no-such-section) ![img](missing.png)\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#no-such-section: no heading with that anchor",
        "missing.png: no such file",
    ]


def nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def mkdocs_config() -> dict:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml names a Python function with a !!python tag; its value does not matter here
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    nav = nav_pages(mkdocs_config()["nav"])
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert sorted(set(nav)) == sorted(on_disk)
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_the_readme_stays_short_and_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    # the home page repeats the README; the README links ARCHITECTURE.md itself rather than its docs page
    skip = {"index.md", "architecture.md"}
    top_level = {f"docs/{p}" for p in nav_pages(mkdocs_config()["nav"]) if "/" not in p and p not in skip}
    assert top_level <= linked, f"pages the README does not link: {sorted(top_level - linked)}"


def test_the_site_hook_names_repository_files_instead_of_linking_outside_the_site() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = "findings/REPORT.md"
    preset = "../../src/normlab/configs/experiment/findings/xiong_warmup.yaml"
    text = (
        f"[`configs/experiment/findings/xiong_warmup.yaml`]({preset}) [the preset]({preset}) "
        "[inside](../demo.md) [gone](../../no/such/file.py) [web](https://example.org/x)"
    )
    assert hooks.rewrite_links(text, page, DOCS, ROOT) == (
        "`configs/experiment/findings/xiong_warmup.yaml` "
        "the preset (`src/normlab/configs/experiment/findings/xiong_warmup.yaml`) "
        "[inside](../demo.md) [gone](../../no/such/file.py) [web](https://example.org/x)"
    )
    assert hooks.rewrite_links(f"[the preset]({preset})", page, DOCS, ROOT, "https://host/o/r") == (
        "[the preset](https://host/o/r/blob/main/src/normlab/configs/experiment/findings/xiong_warmup.yaml)"
    )


def test_the_config_reference_is_generated_from_the_dataclasses() -> None:
    """docs/config.md is what `python scripts/config_reference.py` writes now: a knob added, changed or removed
    in its dataclass without regenerating the page fails here."""
    from normlab.config.reference import PAGE, render

    assert (ROOT / PAGE).read_text() == render(), "run python scripts/config_reference.py"
    for key in (
        "| `depth` |",
        "| `max_steps` |",
        "| `sigma` |",
        "| `post_fraction` |",
        "| `n_train_stories` |",
    ):
        assert key in render(), key


def test_the_metrics_tables_are_generated_from_the_names_and_the_figures() -> None:
    """docs/metrics.md's tables of metric names and report figures are what `python
    scripts/metrics_reference.py` writes from names.py and FIGURES, and its prose says what every name
    measures: a name or a figure added without regenerating or documenting it fails here."""
    from normlab.analysis.metrics_reference import PAGE, SCRIPT, render, undocumented
    from normlab.analysis.plots import FIGURES

    text = (ROOT / PAGE).read_text()
    assert text == render(text), f"{PAGE}: run {SCRIPT}"
    assert undocumented(text) == [], f"{PAGE}: say in its sections what each of these names measures"
    for row in (
        "| `loss` | `names.LOSS` |",
        "| `grad_norm/layer_{i}` | `names.grad_norm_layer(i)` |",
        "| `grad_norm/layer_{i}/{part}` | `names.grad_norm_sublayer(i, part)` |",
        "| `logits/log_z` | `names.LOGIT_LOG_Z` |",
        "| `model_update.png` | Model update since initialisation | `plot_model_update(rs, logx=…)` | "
        "`model_update` |",
        "| `grad_norm_layers.png` | Per-layer gradient norm over training | `plot_grad_heatmap(rs)` | "
        "`grad_norm/layer_{i}` |",
    ):
        assert row in text, row
    assert all(f"| `{spec.filename}` |" in text for spec in FIGURES)
    # the checks can fail: a stale table, a name the prose never writes, a page without the markers
    stale = text.replace("| `logits/log_z` | `names.LOGIT_LOG_Z` |\n", "")
    assert stale != text and render(stale) == text
    unsaid = text.replace("`val_ppl`", "val_ppl").replace("`grad_norm/layer_{i}/ffn`", "ffn")
    assert undocumented(unsaid) == ["val_ppl", "grad_norm/layer_{i}/{part}"]
    with pytest.raises(ValueError, match="no region"):
        render("a page without its markers")


def test_the_tables_of_norms_and_placements_are_generated_from_the_registries() -> None:
    """README.md's and docs/model.md's tables of norms and placements, and the norm names in docs/errors.md,
    are what `python scripts/config_reference.py` writes from NORMS and PLACEMENTS: a norm or placement added
    without regenerating them fails here."""
    from normlab.config.reference import PAGES, render_tables
    from normlab.model import NORMS, PLACEMENTS

    assert {"README.md", "docs/model.md", "docs/errors.md"} <= set(PAGES)
    for page in PAGES:
        text = (ROOT / page).read_text()
        assert text == render_tables(page, text), f"{page}: run python scripts/config_reference.py"
    from normlab.model.norms import RECIPES

    model_page = (ROOT / "docs/model.md").read_text()
    assert all(f"| `{name}` |" in model_page for name in [*NORMS, *RECIPES, *PLACEMENTS])
    readme = (ROOT / "README.md").read_text()
    assert all(f"| `{name}` |" in readme for name in [*NORMS, *RECIPES])  # every norm= a user can type
    with pytest.raises(ValueError, match="no region"):
        render_tables("README.md", "a page without its markers")


def test_the_norm_names_in_the_errors_table_are_generated_from_the_registry() -> None:
    """docs/errors.md's `norm=foo` row lists every option of norm= (each norm of NORMS and each recipe), as
    Hydra does; a list typed by hand goes stale and fails here, and the row must exist exactly once."""
    from normlab.config.reference import render_tables
    from normlab.model.norms import NORMS, RECIPES

    page = "docs/errors.md"
    text = (ROOT / page).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `norm=foo` |"))
    sentence = row.split(" | ")[2]
    assert (
        sentence == f"norm=foo is not an option; norm takes one of {', '.join(sorted([*NORMS, *RECIPES]))}."
    )
    stale = text.replace(sentence, sentence.replace("scalenorm", "scalenorm, l2norm"))
    assert stale != text and render_tables(page, stale) == text  # a hand edit is written back
    with pytest.raises(ValueError, match="table rows starting with"):
        render_tables(page, text.replace("| `norm=foo` |", "| `norm=bar` |"))


ABSOLUTE = re.compile(r"(?<![\w.~$-])/(?:work|home|root|tmp|Users|mnt|private|var/folders)/[\w.-]")


def shipped_text_files() -> list[Path]:
    """What a clone ships for people to read or run: pages, configs, scripts and the sources."""
    patterns = [
        "*.md",
        "docs/**/*.md",
        "docs/**/*.csv",
        "configs/**/*.yaml",
        "scripts/*",
        "src/**/*.py",
        "notebooks/*.ipynb",
    ]
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


def test_no_shipped_file_carries_a_machines_absolute_path() -> None:
    """A maintainer's checkout (/work/…, /home/…) or scratch folder (/tmp/…) means nothing on a clone."""
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
        for p in shipped_text_files()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if ABSOLUTE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_absolute_path_check_can_fire() -> None:
    assert ABSOLUTE.search("--out /work/main/outputs/reproduce/final")
    assert ABSOLUTE.search("ln -s x /tmp/sweep-runs/")
    assert not ABSOLUTE.search("outputs/reproduce/final and https://example.test/home/x")
