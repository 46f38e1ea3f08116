"""Activation statistics of one forward pass, collected by hooks that exist only during that pass.

Hooks cost a Python call per module per forward, so they are installed on the instrumented steps only
(`with ActivationCapture(model) as cap: model.features(x)`) and removed on exit. What the LM head reads and
the output logits are measured by the head and its loss (normlab.train.head_loss), whichever way the
logits are computed, and handed over with `record_head`. Values stay on the device; the caller moves them
to the host with the rest of its row.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
from torch import nn

from normlab.metrics import names
from normlab.model.gpt import CausalSelfAttention, max_causal_logit


@dataclass(frozen=True)
class LogitStats:
    """The output logits' statistics of an instrumented step (0-d float32 tensors on the device): what
    `logits/max`, `logits/mean` and `logits/log_z` report."""

    max: torch.Tensor  # largest logit over positions and vocabulary
    mean: torch.Tensor  # mean logit over positions and vocabulary
    mean_log_z: torch.Tensor  # mean over positions of log Σ_v exp(logit_v), in float32 (what z-loss squares)

    @classmethod
    def of(cls, logits: torch.Tensor) -> LogitStats:
        """From materialised logits (..., vocab); the fused head computes the same on its way instead."""
        logits = logits.detach().float()
        return cls(max=logits.amax(), mean=logits.mean(), mean_log_z=torch.logsumexp(logits, dim=-1).mean())


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square over every element, in float32: sqrt(mean(x²))."""
    return x.detach().float().square().mean().sqrt()


def residual_stream(block_output: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The residual stream x in a block's output: the output itself, or x of ResiDual's (x, d)."""
    return block_output[0] if isinstance(block_output, tuple) else block_output


def attention_modules(block: nn.Module) -> list[CausalSelfAttention]:
    """The attention sublayers of a block."""
    return [m for m in block.modules() if isinstance(m, CausalSelfAttention)]


def activation_keys(n_layers: int) -> list[str]:
    return [
        *(names.act_rms_layer(i) for i in range(n_layers)),
        names.ACT_RMS_HEAD,
        names.LOGIT_MEAN,
        names.LOGIT_MAX,
        names.LOGIT_LOG_Z,
        *(names.attn_max_logit_layer(i) for i in range(n_layers)),
    ]


class ActivationCapture:
    """Records, for the forward passes inside the `with` (and `record_head`), the keys of `activation_keys`:

    - act_rms/layer_i: RMS of the residual stream x leaving block i (over batch, positions and features;
      with ResiDual, its Post-LN stream x, not the accumulating d);
    - act_rms/head_input: RMS of what the LM head reads (after the final norm, if the placement has one);
    - logits/mean, logits/max: mean and maximum of the output logits over batch, positions and vocabulary;
    - logits/log_z: mean over batch and positions of log Σ_v exp(logit_v), in float32 (what z-loss squares);
    - attn_max_logit/layer_i: the largest causal q·k/√d_head of block i over batch, heads and positions.

    With several forwards in the block the last one wins; the trainer captures only the first micro-batch.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.n_layers = len(model.blocks)
        self.keys = activation_keys(self.n_layers)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._found: dict[str, torch.Tensor] = {}

    def _record(self, key: str, fn: Any):
        def hook(module: nn.Module, args: tuple, output: Any = None) -> None:
            self._found[key] = fn(args, output)

        return hook

    def __enter__(self) -> ActivationCapture:
        self._found = {}
        for i, block in enumerate(self.model.blocks):
            self._handles.append(
                block.register_forward_hook(
                    self._record(names.act_rms_layer(i), lambda a, out: rms(residual_stream(out)))
                )
            )
            for attn in attention_modules(block):
                self._hook_max_logit(attn, names.attn_max_logit_layer(i))
        return self

    def _hook_max_logit(self, attn: CausalSelfAttention, key: str) -> None:
        """The block's max attention logit from the queries and keys its q_norm and k_norm hand to the
        scores (the explicit q·k costs one more batched matmul, on instrumented steps only)."""
        queries: list[torch.Tensor] = []

        def keep_queries(module: nn.Module, args: tuple, q: torch.Tensor) -> None:
            queries[:] = [q]

        def record(module: nn.Module, args: tuple, k: torch.Tensor) -> None:
            self._found[key] = max_causal_logit(queries.pop(), k)

        self._handles.append(attn.q_norm.register_forward_hook(keep_queries))
        self._handles.append(attn.k_norm.register_forward_hook(record))

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def record_head(self, head_input: torch.Tensor, logits: LogitStats) -> None:
        """What the LM head read and the logits it gave on the forward captured (normlab.train.head_loss
        measures them, fused or not): call after the `with` of that forward."""
        self._found[names.ACT_RMS_HEAD] = rms(head_input)
        self._found[names.LOGIT_MAX] = logits.max
        self._found[names.LOGIT_MEAN] = logits.mean
        self._found[names.LOGIT_LOG_Z] = logits.mean_log_z

    def values(self) -> torch.Tensor:
        """The captured values as one float32 tensor in `self.keys` order (NaN where nothing was captured)."""
        nan = torch.tensor(float("nan"))
        device = next(iter(self._found.values())).device if self._found else nan.device
        return torch.stack([self._found.get(k, nan.to(device)).float().reshape(()) for k in self.keys])
