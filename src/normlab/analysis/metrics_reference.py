"""docs/metrics.md's two generated tables: every metric name `normlab.metrics.names` defines, with the
name to import it by, and every figure of a sweep's report (FIGURES), with the function that draws it and
the metric a run needs to appear in it (`missing_variants.FAMILIES`). Rendered from those registries, so the
tables cannot drift from the code: `python scripts/metrics_reference.py` writes them between their markers,
and tests/test_docs.py fails when the committed page and this rendering differ. The page's prose, which
says what each metric measures and when it is logged, stays hand-written around them.

Its own module because it reads the registries as documentation (no run directory): the report never
imports it."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

from normlab.analysis.missing_variants import FAMILIES
from normlab.analysis.plots import FIGURES
from normlab.generated import with_region, without_regions
from normlab.metrics import names

PAGE = "docs/metrics.md"
SCRIPT = "python scripts/metrics_reference.py"


def metric_names() -> list[tuple[str, str]]:
    """(name as written to metrics.jsonl, how to get it from `names`) for every name names.py defines, in
    its order: constants as they are, per-layer functions with their arguments as placeholders
    (`grad_norm/layer_{i}`, from `names.grad_norm_layer(i)`)."""
    out = []
    for attr, value in vars(names).items():
        if attr.isupper() and isinstance(value, str):
            out.append((value, f"names.{attr}"))
        elif inspect.isfunction(value) and value.__module__ == names.__name__:
            params = list(inspect.signature(value).parameters)
            out.append((value(*(f"{{{p}}}" for p in params)), f"names.{attr}({', '.join(params)})"))
    return out


def documented_forms(name: str) -> list[str]:
    """The forms the page's prose writes `name` in: a `{part}` placeholder is written out as each sublayer
    (`grad_norm/layer_{i}/attn`, …), as the tables of what each part measures do."""
    if "{part}" not in name:
        return [name]
    return [name.replace("{part}", part) for part in names.SUBLAYERS]


def names_table() -> str:
    rows = ["| name | import as (`from normlab.metrics import names`) |", "|---|---|"]
    rows += [f"| `{name}` | `{python}` |" for name, python in metric_names()]
    return "\n".join(rows) + (
        f"\n\n`{{i}}` is the block index (0 = next to the embedding); `{{part}}` is one of "
        f"{', '.join(f'`{p}`' for p in names.SUBLAYERS)} (`names.SUBLAYERS`)."
    )


def _needs(key: str) -> tuple[str, str]:
    """(the metric a run needs to be drawn in figure `key`, why a run may not have it)."""
    if key not in FAMILIES:
        return "–", "–"
    family, why = FAMILIES[key]
    shown = f"{family}{{i}}" if family.endswith("_") else family  # a per-layer family: its prefix
    return f"`{shown}`", " ".join(why.split()).replace("|", "\\|")


def figures_table() -> str:
    rows = [
        "| file | figure | drawn by (`normlab.analysis`) | a variant is drawn when its runs have | "
        "otherwise, the note under it says |",
        "|---|---|---|---|---|",
    ]
    for spec in FIGURES:
        needs, why = _needs(spec.key)
        options = f"(rs, {', '.join(f'{o}=…' for o in spec.options)})" if spec.options else "(rs)"
        rows.append(
            f"| `{spec.filename}` | {spec.title} | `{spec.draw.__name__}{options}` | {needs} | {why} |"
        )
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {"metric names": names_table, "report figures": figures_table}


def render(text: str) -> str:
    """`text` (docs/metrics.md) with each generated region replaced by its table as the registries give it."""
    for region, table in TABLES.items():
        text = with_region(text, region, table(), PAGE)
    return text


def undocumented(text: str) -> list[str]:
    """The names of names.py that the page's hand-written part (outside the generated tables) never writes
    in backticks: a metric added without saying what it measures."""
    prose = without_regions(text, TABLES)
    written = set(re.findall(r"`([^`]+)`", prose))
    return [name for name, _ in metric_names() if not all(form in written for form in documented_forms(name))]
