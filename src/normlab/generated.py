"""The regions of a documentation page that code writes: a table between `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->`, the page's prose around it left as it is. One definition of the markers for
every generated table (the norms and placements in README.md and docs/model.md, the metric names and
figures in docs/metrics.md), so the scripts that write them and the tests that check them agree."""

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
