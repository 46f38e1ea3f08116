"""What a block's parameters are, declared where their modules are built rather than read from attribute
names: the role of a module's parameters (a norm's, attention's, the feed-forward's), and which of a module's
parameters a norm that removes the batch shift cancels (whole: `ALL`; the norms that do: `removes_shift`).
Its own module because the blocks declare these and the GPT reads them (`GPT.parameter_parts`,
`GPT.norm_cancelled_parameters`): neither owns the other's vocabulary.
"""

from __future__ import annotations

from torch import nn

ALL = slice(None)  # every row of a parameter

# The role of a module's parameters in a block, declared where the module is built (not read from attribute
# names): a norm's gain and bias, attention, the feed-forward. Per-part gradient norms group by it
# (`GPT.parameter_parts`); a module without one takes its parent's.
ROLE = "normlab_role"
NORM, ATTN, FFN = "norm", "attn", "ffn"


def declare(module: nn.Module, role: str) -> nn.Module:
    """`module`, its parameters declared as `role` (NORM, ATTN or FFN)."""
    setattr(module, ROLE, role)
    return module


def removes_shift(norm: nn.Module) -> bool:
    return bool(getattr(norm, "removes_batch_shift", False))


def bias_rows(module: nn.Module) -> list[tuple[nn.Parameter, slice]]:
    """A module's own bias, if it has one, as (parameter, rows)."""
    bias = getattr(module, "bias", None)
    return [(bias, ALL)] if isinstance(bias, nn.Parameter) else []
