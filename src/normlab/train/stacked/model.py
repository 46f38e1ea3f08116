"""`StackedModel`: the members' GPTs as one set of stacked tensors, run with `torch.vmap`.

Every member is built exactly as a run alone builds it (its own seed, its checkpoint loaded), then its
parameters are copied into row m of one (members × parameters) float32 buffer, `flat`; each parameter is
a view into it, shape (members, *its shape), a leaf of autograd whose `.grad` is the same view into a
buffer `grad_flat` (backward accumulates into it in place). So the optimizer, the gradient norms and
clipping are a few operations on two matrices whatever the number of parameters, and member m's state is
row m. Buffers (BatchNorm's running statistics, sinusoidal positions) are stacked the same way, one
tensor each, updated in place under vmap.

The forward is the GPT's own: a parameterless copy of member 0's module (`template`, on the meta device)
called with the stacked tensors in its parameters' places (what `torch.func.functional_call` does, its
slots found once), under `torch.vmap` over the stack. The GPT's
matrix products and attention are operators with their own vmap rules (normlab.model.stackable): a stack
of linear layers is one `baddbmm`, attention folds the stack into its batch. The backward is ordinary
autograd outside vmap, on the sum of the members' objectives: the gradient of a sum of independent losses
is, in each member's slice, that member's own gradient.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import vmap

# Each parameter's gradient is a view into `grad_flat`, strided as the parameter is (a slice of the columns of
# a row-major matrix); autograd accumulates into it in place and says the layout is unusual, once.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class _Slots:
    """Where the template's parameters and buffers live (each module's own `_parameters` / `_buffers` entry,
    a tied weight in every module that holds it), so that a call can hold the stack's tensors there and
    put the template's back after: what torch.func.functional_call does, without finding the modules, the
    ties and the names again at every call (a stacked step's host time: docs/performance.md)."""

    def __init__(self, template: nn.Module, params: list[str], buffers: list[str]) -> None:
        def owners(kind: str, names: list[str]) -> list[list[tuple[dict, str]]]:
            found: dict[str, list[tuple[dict, str]]] = {name: [] for name in names}
            for module_name, module in template.named_modules(remove_duplicate=False):
                for attr, value in getattr(module, kind).items():
                    full = f"{module_name}.{attr}" if module_name else attr
                    canonical = self._canonical.get(id(value), full)
                    if canonical in found:
                        found[canonical].append((getattr(module, kind), attr))
            return [found[name] for name in names]

        self._canonical: dict[int, str] = {}
        for name, p in template.named_parameters():  # a tied weight once, under its first name
            self._canonical[id(p)] = name
        self.params = owners("_parameters", params)
        self.buffers = owners("_buffers", buffers)
        self.saved = [
            (slot, attr, slot[attr]) for owners_ in self.params + self.buffers for slot, attr in owners_
        ]

    @contextlib.contextmanager
    def holding(self, params: list[torch.Tensor], buffers: list[torch.Tensor]) -> Iterator[None]:
        for owners_, value in zip(self.params + self.buffers, [*params, *buffers], strict=True):
            for slot, attr in owners_:
                slot[attr] = value
        try:
            yield
        finally:
            for slot, attr, value in self.saved:
                slot[attr] = value


class StackedModel:
    """`members` (GPTs of one architecture, on `device`) stacked; member 0's module is kept as the `shell`
    a single member's state is read through (`member_state_dict`, `member_model`)."""

    def __init__(
        self, members: Sequence[nn.Module], device: torch.device, first: Collection[str] = ()
    ) -> None:
        self.size = len(members)
        self.device = device
        self.shell = members[0]
        named = [(n, p) for n, p in self.shell.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.shapes = {n: tuple(p.shape) for n, p in named}
        self.numels = {n: p.numel() for n, p in named}
        # the columns: the parameters named in `first` (those weight decay applies to) before the rest, so
        # that the optimizer treats each set as one block of columns
        self.offsets: dict[str, int] = {}
        for name in [n for n in self.names if n in first] + [n for n in self.names if n not in first]:
            self.offsets[name] = sum(self.numels[k] for k in self.offsets)
        self.n_first = sum(self.numels[n] for n in self.names if n in first)
        self._slices = {n: slice(self.offsets[n], self.offsets[n] + self.numels[n]) for n in self.names}
        self.n_params = sum(self.numels.values())
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
        self._mode = self.template.training
        self._slots = _Slots(self.template, self.names, list(self.buffers))
        self._param_list = [self.params[n] for n in self.names]
        self._buffer_list = list(self.buffers.values())
        self.randomness = "different" if _has_dropout(self.shell) else "error"
        self._vmapped: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def _cols(self, name: str) -> slice:
        return self._slices[name]

    # ------------------------------------------------------------------------------------------------
    # forward
    # ------------------------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> None:
        """Training or evaluation mode (dropout, BatchNorm's statistics) for every member (set through the
        template's modules only when it changes: every step asks for it)."""
        if mode != self._mode:
            self.template.train(mode)
            self._mode = mode

    def map(self, fn: Callable[..., Any], *args: Any, shared: Sequence[bool] = ()) -> Any:
        """`fn(model, *args)` for every member at once: args with a leading stack dimension, except those
        `shared` marks (the same tensor for every member: the evaluation's windows); outputs come back
        with a leading stack dimension."""
        dims = tuple(None if i < len(shared) and shared[i] else 0 for i in range(len(args)))
        key = (fn, dims)
        mapped = self._vmapped.get(key)
        if mapped is None:

            def one(params: list[torch.Tensor], buffers: list[torch.Tensor], *a: Any) -> Any:
                with self._slots.holding(params, buffers):
                    return fn(self.template, *a)

            mapped = vmap(one, in_dims=(0, 0, *dims), randomness=self.randomness)
            self._vmapped[key] = mapped
        return mapped(self._param_list, self._buffer_list, *args)

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
        (members × parameters) tensor: one norm per parameter over its block of columns, every member's row
        at once (the numbers a run alone's `torch._foreach_norm` gives), so the calls do not grow with the
        members."""
        norms = [torch.linalg.vector_norm(tensor[:, cols], dim=1) for cols in self._slices.values()]
        return torch.stack(norms, 1).float().square()


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
