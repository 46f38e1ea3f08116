"""Helpers the findings tests share: a finding's checks in brief, and its figures drawn."""

from __future__ import annotations

import matplotlib.pyplot as plt

from normlab.study.findings import FINDINGS


def verdicts(outcome):
    return [(c.name, round(c.est.value, 3), c.verdict) for c in outcome.checks]


def draws(name, rs, extras=None) -> int:
    """The finding's figures for these runs: each a (file key, caption, Figure); returns how many."""
    drawn = FINDINGS[name].draw(rs, extras or {})
    assert drawn
    for key, caption, fig in drawn:
        assert key.isidentifier() and caption.endswith(".") and fig.axes
        plt.close(fig)
    return len(drawn)


def jitter(seed, layer, step):
    """Seed-to-seed noise that differs between blocks and grows with training (seeds never agree exactly)."""
    return 1 + 0.02 * (seed - 1) * ((layer % 2) - 0.5) * (0.2 + step / 100)
