"""Write docs/metrics.md's generated tables — every metric name of src/normlab/metrics/names.py and every figure
of a sweep's report (FIGURES) — between their markers, leaving the page's prose as it is:
`python scripts/metrics_reference.py` (after adding a metric name or a figure; tests/test_docs.py says when it
is due)."""

from __future__ import annotations

from pathlib import Path

from normlab.analysis.metrics_reference import PAGE, render

if __name__ == "__main__":
    page = Path(__file__).resolve().parents[1] / PAGE
    page.write_text(render(page.read_text()))
    print(f"wrote the tables of {page}")
