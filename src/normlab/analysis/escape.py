"""Text from run directories, shown as text in report.md: never Markdown that links, embeds or formats.

A run directory can come from anywhere (a colleague's sweep, a downloaded archive); its names, config
values, labels and reasons are data, not markup. `md_text` backslash-escapes the characters that would
start a link, an image, emphasis, code, an HTML tag or entity, or a table cell, so that
`experiment_name='x ![leak](/etc/hostname)'` reads as exactly that. `markdown_view` is a RunSet whose every
such string is escaped once, for the report's tables and sentences (the figures and CSV files use the
original).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pandas as pd

from normlab.analysis.load import RunSet

# CommonMark's backslash escapes, for the characters that mean something inside a line; `_` only at the edge
# of a word (inside one, as in 0_ln-pre, it never starts emphasis)
_SPECIAL = re.compile(r"[\\`*\[\]<>|&~#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_text(value: Any) -> str:
    """`value` as Markdown that shows exactly its text, on one line."""
    text = " ".join(str(value).splitlines())
    return _SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def _escaped(value: Any) -> Any:
    return md_text(value) if isinstance(value, str) else value


def markdown_view(rs: RunSet) -> RunSet:
    """`rs` with every string from the run directories escaped for Markdown: run names, variant labels,
    config keys and values, reasons, sources and loader warnings (numbers untouched)."""
    config_keys = list(rs.runs.attrs.get("config_keys", []))
    keys = {
        c: md_text(c) for c in {*config_keys, *rs.varying, *rs.group_keys}
    }  # the report's own columns stay
    runs = rs.runs.rename(index=_escaped, columns=keys)
    for column in runs.columns:
        if not pd.api.types.is_numeric_dtype(runs[column]):
            runs[column] = runs[column].map(_escaped)
    runs.attrs = {**rs.runs.attrs, "config_keys": [keys[k] for k in config_keys]}
    metrics = rs.metrics.copy()
    if "run" in metrics:
        metrics["run"] = metrics["run"].map(_escaped)
    return dataclasses.replace(
        rs,
        runs=runs,
        metrics=metrics,
        varying=[keys.get(k, md_text(k)) for k in rs.varying],
        group_keys=[keys.get(k, md_text(k)) for k in rs.group_keys],
        sources=[md_text(p) for p in rs.sources],  # type: ignore[misc]
        warnings=[md_text(w) for w in rs.warnings],
        unreadable=[(md_text(run), md_text(why)) for run, why in rs.unreadable],
        missing={
            md_text(sweep): dataclasses.replace(
                m, jobs=None if m.jobs is None else [md_text(j) for j in m.jobs]
            )
            for sweep, m in rs.missing.items()
        },
    )
