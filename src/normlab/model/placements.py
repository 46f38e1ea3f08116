"""Where the norm goes in a residual block, registered by the name users type (`placement=pre`).

A residual branch is `x → [slot A] → F → [slot B] → merge with x → [slot C]`; a placement is the
choice of filled slots plus whether a final norm sits before the LM head. Adding a placement is one
entry in PLACEMENTS.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    before_sublayer: bool  # slot A: N(x) feeds the sublayer
    after_sublayer: bool  # slot B: the sublayer's output is normalised before the add
    after_add: bool  # slot C: the sum is normalised (the residual stream itself passes through N)
    final_norm: bool  # a norm between the last block and the LM head

    # With a norm that subtracts its input's batch mean (BatchNorm in training), whether a vector added to
    # every sequence of the batch at one of these points is subtracted again before anything else reads it.

    @property
    def removes_stream_shift(self) -> bool:
        """Added to the residual stream: every sublayer reads the stream through slot A and the head reads
        it through the final norm (where slot C is filled it normalises the sum too)."""
        return self.before_sublayer and self.final_norm

    @property
    def removes_merge_shift(self) -> bool:
        """Added to a branch's output as it merges with the stream (after slot B): slot C normalises the
        sum, or the sum is the stream."""
        return self.after_add or self.removes_stream_shift

    @property
    def removes_sublayer_shift(self) -> bool:
        """Added to a sublayer's output (before slot B)."""
        return self.after_sublayer or self.removes_merge_shift


PLACEMENTS: dict[str, Placement] = {
    "pre": Placement(before_sublayer=True, after_sublayer=False, after_add=False, final_norm=True),
    "post": Placement(before_sublayer=False, after_sublayer=False, after_add=True, final_norm=False),
    "double": Placement(before_sublayer=True, after_sublayer=True, after_add=False, final_norm=True),
}


def branch_formula(placement: Placement, norm_symbol: str, sublayer: str, residual_scale: float = 1.0) -> str:
    """The update of one residual branch as a formula, e.g. `x ← LN(2.21·x + Attn(x))`."""

    def n(arg: str, filled: bool) -> str:
        return f"{norm_symbol}({arg})" if filled and norm_symbol else arg

    skip = "x" if residual_scale == 1.0 else f"{residual_scale:.2f}·x"
    branch = n(f"{sublayer}({n('x', placement.before_sublayer)})", placement.after_sublayer)
    return f"x ← {n(f'{skip} + {branch}', placement.after_add)}"
