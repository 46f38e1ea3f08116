"""`StackedModel`: the members' GPTs as one set of stacked tensors, run with `torch.vmap`.

Every member is built exactly as a run alone builds it (its own seed, its checkpoint loaded), then its
parameters are copied into row m of one (members × parameters) float32 buffer, `flat`; each parameter is
a view into it, shape (members, *its shape), a leaf of autograd whose `.grad` is the same view into a
buffer `grad_flat` (backward accumulates into it in place). So the optimizer, the gradient norms and
clipping are a few operations on two matrices whatever the number of parameters, and member m's state is
row m. Buffers (BatchNorm's running statistics, sinusoidal positions) are stacked the same way, one
tensor each, updated in place under vmap.

The forward is the GPT's own: `torch.func.functional_call` on a parameterless copy of member 0's module
(`template`, on the meta device) with the stacked tensors, under `torch.vmap` over the stack. The GPT's
matrix products and attention are operators with their own vmap rules (normlab.model.stackable): a stack
of linear layers is one `baddbmm`, attention folds the stack into its batch. The backward is ordinary
autograd outside vmap, on the sum of the members' objectives: the gradient of a sum of independent losses
is, in each member's slice, that member's own gradient.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from normlab.metrics.layout import squared_norms

# Each parameter's gradient is a view into `grad_flat`, strided as the parameter is (a slice of the columns of
# a row-major matrix); autograd accumulates into it in place and says the layout is unusual, once.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class _Apply(nn.Module):
    """Calls `fn(model, *args)`: lets functional_call run any method of the GPT (features, a probed
    forward, layer ablation), not only `forward`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.model, *args)


class StackedModel:
    """`members` (GPTs of one architecture, on `device`) stacked; member 0's module is kept as the `shell`
    a single member's state is read through (`member_state_dict`, `member_model`)."""

    def __init__(self, members: Sequence[nn.Module], device: torch.device) -> None:
        self.size = len(members)
        self.device = device
        self.shell = members[0]
        named = [(n, p) for n, p in self.shell.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.shapes = {n: tuple(p.shape) for n, p in named}
        sizes = [p.numel() for _, p in named]
        self.offsets = dict(zip(self.names, [sum(sizes[:i]) for i in range(len(sizes))], strict=True))
        self.numels = dict(zip(self.names, sizes, strict=True))
        self.n_params = sum(sizes)
        self.flat = torch.empty(self.size, self.n_params, device=device)
        self.grad_flat = torch.zeros_like(self.flat)
        with torch.no_grad():
            for m, model in enumerate(members):
                own = dict(model.named_parameters())
                for name in self.names:
                    self.flat[m, self._cols(name)] = own[name].detach().reshape(-1).float()
        self.params: dict[str, torch.Tensor] = {}
        for name in self.names:
            view = self.flat[:, self._cols(name)].view(self.size, *self.shapes[name])
            view.requires_grad_()
            view.grad = self.grad_flat[:, self._cols(name)].view(self.size, *self.shapes[name])
            self.params[name] = view
        self.buffers: dict[str, torch.Tensor] = {
            name: torch.stack([dict(model.named_buffers())[name] for model in members]).to(device)
            for name, _ in self.shell.named_buffers()
        }
        self.template = _meta_copy(self.shell)
        self._apply = _Apply(self.template)
        self._state = (
            {f"model.{k}": v for k, v in self.params.items()},
            {f"model.{k}": v for k, v in self.buffers.items()},
        )
        self.randomness = "different" if _has_dropout(self.shell) else "error"
        self._vmapped: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._views: dict[int, list[torch.Tensor]] = {}

    def _cols(self, name: str) -> slice:
        start = self.offsets[name]
        return slice(start, start + self.numels[name])

    # ------------------------------------------------------------------------------------------------
    # forward
    # ------------------------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> None:
        """Training or evaluation mode (dropout, BatchNorm's statistics) for every member."""
        self.template.train(mode)

    def map(self, fn: Callable[..., Any], *args: Any, shared: Sequence[bool] = ()) -> Any:
        """`fn(model, *args)` for every member at once: args with a leading stack dimension, except those
        `shared` marks (the same tensor for every member: the evaluation's windows); outputs come back
        with a leading stack dimension."""
        dims = tuple(None if i < len(shared) and shared[i] else 0 for i in range(len(args)))
        key = (fn, dims)
        mapped = self._vmapped.get(key)
        if mapped is None:

            def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *a: Any) -> Any:
                return functional_call(self._apply, (params, buffers), (fn, *a), strict=False)

            mapped = vmap(one, in_dims=(0, 0, *dims), randomness=self.randomness)
            self._vmapped[key] = mapped
        return mapped(*self._state, *args)

    def head_weight(self) -> torch.Tensor:
        """The LM head's weight of every member, (members, vocab, d_model) (the token embedding when tied)."""
        tied = self.shell.head.weight is self.shell.tok_emb.weight
        return self.params["tok_emb.weight" if tied else "head.weight"]

    def token_embedding(self) -> torch.Tensor:
        return self.params["tok_emb.weight"]

    # ------------------------------------------------------------------------------------------------
    # one member, as a run alone has it
    # ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def member_model(self, m: int) -> nn.Module:
        """The shell GPT holding member m's parameters and buffers now (overwritten by the next call)."""
        for name, p in self.shell.named_parameters():
            if name in self.params:
                p.copy_(self.params[name][m])
        for name, b in self.shell.named_buffers():
            b.copy_(self.buffers[name][m])
        return self.shell

    def member_state_dict(self, m: int) -> dict[str, torch.Tensor]:
        """Member m's `state_dict()` as its GPT alone returns it (tied weights under both names): copies."""
        return {k: v.detach().clone() for k, v in self.member_model(m).state_dict().items()}

    def member_view(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """Parameter `name`'s columns of a (members × parameters) tensor, shaped (members, *its shape)."""
        return tensor[:, self._cols(name)].view(self.size, *self.shapes[name])

    def member_tensors(
        self, tensor: torch.Tensor, m: int, names: list[str] | None = None
    ) -> list[torch.Tensor]:
        """Member m's parameters (`names`, default all) in a (members × parameters) tensor, each shaped as the
        parameter: contiguous views, what torch's fused and foreach kernels take."""
        return [tensor[m, self._cols(n)].view(self.shapes[n]) for n in names or self.names]

    def squared_norms(self, tensor: torch.Tensor) -> torch.Tensor:
        """(members, parameter tensors): each member's squared L2 norm of each parameter's entries of a
        (members × parameters) tensor, from one fused `torch._foreach_norm` as a run alone computes them."""
        views = self._views.get(id(tensor)) if tensor is self.grad_flat or tensor is self.flat else None
        if views is None:
            views = [v for m in range(self.size) for v in self.member_tensors(tensor, m)]
            if tensor is self.grad_flat or tensor is self.flat:  # made once: a step's host work stays small
                self._views[id(tensor)] = views
        return squared_norms(views).view(self.size, len(self.names))


def _meta_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` without storage (the meta device), its tied parameters tied again (moving a module
    to another device type gives each module a parameter of its own)."""
    copied = copy.deepcopy(model).to("meta")
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in first:
            first[id(p)] = name
            continue
        owner, _, attr = name.rpartition(".")
        setattr(copied.get_submodule(owner), attr, copied.get_parameter(first[id(p)]))
    return copied


def _has_dropout(model: nn.Module) -> bool:
    return any(
        (isinstance(mod, nn.Dropout) and mod.p > 0) or float(getattr(mod, "dropout", 0.0) or 0.0) > 0
        for mod in model.modules()
    )
