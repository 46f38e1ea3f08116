"""The regions of a documentation page that code writes: a table between `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`, the page's prose around it left as it is. One definition of the markers for
every generated table (the norms and placements in README.md and docs/model.md, the metric names and
figures in docs/metrics.md), so the scripts that write them and the tests that check them agree.

A row of a hand-written table can be generated too (`with_cell`): markers on their own lines would end a
Markdown table, so such a row is found by its first cell, which stays as written (docs/errors.md's
`norm=foo`, whose sentence lists the norms)."""

from __future__ import annotations

from collections.abc import Iterable


def markers(name: str) -> tuple[str, str]:
    """The lines that open and close region `name`."""
    return f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"


def with_region(text: str, name: str, body: str, page: str) -> str:
    """`text` (the page `page`) with region `name` holding `body`; ValueError if the page lacks its markers."""
    start, end = markers(name)
    if start not in text or end not in text:
        raise ValueError(f"{page} has no region {start} … {end}; add the two markers where the table goes")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def without_regions(text: str, names: Iterable[str]) -> str:
    """`text` without the regions `names` (markers included): the page's hand-written part."""
    for name in names:
        start, end = markers(name)
        if start in text and end in text:
            head, rest = text.split(start, 1)
            text = head + rest.split(end, 1)[1]
    return text


def with_cell(text: str, row: str, column: int, value: str, page: str) -> str:
    """`text` (the page `page`) with cell `column` (0 = the first) of the table row whose first cell is `row`
    holding `value`; ValueError if the page has no such row, or more than one."""
    lines = text.split("\n")
    found = [i for i, line in enumerate(lines) if line.startswith(f"| {row} |")]
    if len(found) != 1:
        raise ValueError(f"{page} has {len(found)} table rows starting with '| {row} |', not one")
    cells = lines[found[0]].strip().strip("|").split(" | ")
    if not 0 < column < len(cells):
        raise ValueError(f"{page}: the row '| {row} |' has no cell {column} to write")
    cells[column] = value
    lines[found[0]] = "| " + " | ".join(c.strip() for c in cells) + " |"
    return "\n".join(lines)
