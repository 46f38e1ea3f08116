"""Write docs/config.md, the configuration reference, from the config dataclasses:
`python scripts/config_reference.py` (after adding or changing a knob; tests/test_docs.py says when it is due)."""

from __future__ import annotations

from pathlib import Path

from normlab.config.reference import PAGE, render

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / PAGE
    path.write_text(render())
    print(f"wrote {path}")
