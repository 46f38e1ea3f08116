"""Write docs/config.md, the configuration reference, from the config dataclasses, the tables of norms and
placements in README.md and docs/model.md from NORMS and PLACEMENTS, and the norm names in docs/errors.md:
`python scripts/config_reference.py` (after adding or changing a knob, a norm or a placement;
tests/test_docs.py says when it is due)."""

from __future__ import annotations

from pathlib import Path

from normlab.config.reference import PAGE, PAGES, render, render_tables

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    (root / PAGE).write_text(render())
    print(f"wrote {root / PAGE}")
    for page in PAGES:
        (root / page).write_text(render_tables(page, (root / page).read_text()))
        print(f"wrote the generated parts of {root / page}")
