"""The GPT's matrix products and attention as operators with a rule for `torch.vmap`, so that a stack of
models (normlab.train.stacked: one model per run of a sweep, parameters with a leading stack dimension)
runs as batched kernels instead of what vmap's generic rules make of them.

- `linear`: F.linear for one model; for a stack, one `baddbmm` (bias added by the matrix product itself,
  as `addmm` does for one model). vmap's own rule for F.linear is a batched matmul and then a separate
  broadcast add, 1.6× the time of this on the CPU (4 × (1024 × 64) @ (64 × 256), one thread).
- `causal_attention`: F.scaled_dot_product_attention(is_causal=True) for one model; for a stack, the
  same call with the stack folded into the batch (attention has no weights). torch has no vmap rule
  for the CPU's fused attention kernel and would loop over the stack.

Each is defined with a CompositeImplicitAutograd kernel, which is the plain torch call: autograd,
torch.compile and a single run see exactly what they saw before (bit-identical). The vmap rules run on the
physical (stacked) tensors, so a backward taken outside vmap — the gradient of the sum of the members'
losses — differentiates these batched kernels with torch's ordinary autograd.

The rules are registered as the operators' kernels for functorch's batching key (`batched`), the way
torch.library.register_vmap does it minus its generic wrapping (pytree flattening of every argument and
output, an info object, identity checks): a stack's step calls them a dozen times, and on a GPU, where the
host's time per step is the step's time, that wrapping cost more than the rest of the forward's vmap
(measured: 1.5 ms of a 4 ms stacked forward at d_model 16 on the CPU). It uses functorch's own unwrap and
wrap functions (tests/test_private_apis.py checks them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_LIB = torch.library.Library("normlab", "DEF")  # noqa: TID251 (the one definition of normlab's operators)
_LIB.define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIB.define("causal_attention(Tensor q, Tensor k, Tensor v, float dropout_p) -> Tensor")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight, bias)


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)


_LIB.impl("linear", _linear, "CompositeImplicitAutograd")
_LIB.impl("causal_attention", _causal_attention, "CompositeImplicitAutograd")
_linear_op = torch.ops.normlab.linear.default
_attention_op = torch.ops.normlab.causal_attention.default


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, with a vmap rule that makes a stack of them one baddbmm."""
    return _linear_op(x, weight, bias)


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """Causal scaled-dot-product attention of (batch, heads, time, d_head) tensors; under vmap the stack is
    folded into the batch."""
    return _attention_op(q, k, v, dropout_p)


def _stacked(t: torch.Tensor | None, dim: int | None, size: int) -> torch.Tensor | None:
    """`t` with its stack dimension first (a tensor without one is expanded to the stack)."""
    if t is None or dim == 0:  # already first: no view (and no node in the backward) for nothing
        return t
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


def _linear_vmap(info, in_dims, x, weight, bias):  # noqa: ANN001, ANN202 (torch.library's vmap rule)
    x_dim, w_dim, b_dim = in_dims
    if w_dim is None and b_dim is None:  # shared weights: one linear over everything
        return _linear_op(x.movedim(x_dim, 0), weight, bias), 0
    s = info.batch_size
    x, weight, bias = _stacked(x, x_dim, s), _stacked(weight, w_dim, s), _stacked(bias, b_dim, s)
    flat = x.reshape(s, -1, x.shape[-1])
    if bias is None:
        out = torch.bmm(flat, weight.transpose(1, 2))
    else:
        out = torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
    return out.view(*x.shape[:-1], weight.shape[1]), 0


def _attention_vmap(info, in_dims, q, k, v, dropout_p):  # noqa: ANN001, ANN202 (torch.library's vmap rule)
    s = info.batch_size
    q, k, v = (_stacked(t, d, s) for t, d in zip((q, k, v), in_dims[:3], strict=True))
    out = _attention_op(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), dropout_p)
    return out.unflatten(0, (s, q.shape[1])), 0


class _Info:
    """What a rule reads of the vmap it runs in (torch.library's VmapInfo): the stack's size."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size


_BATCHED = torch._C.DispatchKeySet(torch._C.DispatchKey.FuncTorchBatched)


def batched(op: Any, rule: Callable[..., tuple[torch.Tensor, int]]) -> Callable[..., torch.Tensor]:
    """`rule(info, in_dims, *physical args) -> (physical output, its stack dim)` as the kernel of operator
    `op` that functorch's batching key calls with the logical (batched) arguments: unwrap the arguments
    batched at the current vmap level, run the rule below that key, wrap the output at the level."""
    functorch = torch._C._functorch

    def kernel(keyset: Any, *args: Any) -> torch.Tensor:  # noqa: ARG001 (the dispatcher's key set)
        level = functorch.current_level()
        physical, dims, size = [], [], 0
        for arg in args:
            if isinstance(arg, torch.Tensor) and functorch.maybe_get_level(arg) == level:
                arg, dim = functorch._unwrap_batched(arg, level)
                size = arg.shape[dim]
            else:
                dim = None
            physical.append(arg)
            dims.append(dim)
        with torch._C._ExcludeDispatchKeyGuard(_BATCHED):
            if all(dim is None for dim in dims):  # batched at another level only: nothing to do at this one
                return op(*physical)
            out, out_dim = rule(_Info(size), tuple(dims), *physical)
        return functorch._add_batch_dim(out, out_dim, level)

    return kernel


_LIB.impl("linear", batched(_linear_op, _linear_vmap), "FuncTorchBatched", with_keyset=True)
_LIB.impl("causal_attention", batched(_attention_op, _attention_vmap), "FuncTorchBatched", with_keyset=True)


class Linear(nn.Linear):
    """nn.Linear through `linear`: the same parameters and result, and a stack of them is one baddbmm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
