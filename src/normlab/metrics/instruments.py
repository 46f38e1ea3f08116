"""The measurements of an instrumented step (step 0, every step up to `metrics.dense_until`, then every
`metrics.every` steps), in one place.

The trainer asks `Instruments.begin(step)` for a `StepProbe` on those steps only, and the probe is called
at four points of the step: before the forward (model update, parameter snapshot, the embedding's
effective rank), with the first micro-batch's forward measurements (the probed forward's taps and the
head's statistics, which normlab.train.head_loss computes in the same graph as the loss), after the
backward (gradient histograms), and after the optimizer step (update ratios). Everything stays on the
device until `StepProbe.row()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from normlab.knobs import Knobs, knob
from normlab.metrics import names
from normlab.metrics.activations import activation_keys
from normlab.metrics.embedding import effective_rank, token_embedding
from normlab.metrics.histograms import DeviceHistogram, layer_grad_histograms, to_host
from normlab.metrics.layout import ParamLayout
from normlab.metrics.model_update import ModelUpdateProbe, module_outputs
from normlab.metrics.updates import UpdateRatio, param_norm_keys, update_ratio_keys


@dataclass(frozen=True)
class InstrumentConfig(Knobs):
    """Measurements beyond the per-step loss / lr / grad norms (docs/metrics.md lists every name)."""

    GROUP: ClassVar[str] = "metrics"
    enabled: bool = knob(
        True,
        "false = the bare loop: only loss, lr, grad_norm, clipped, tokens_per_s; no spikes (the overhead baseline)",
    )
    every: int = knob(
        10,
        "instrumented steps (parameter norms, update ratios, activation RMS, attention and output logits, model "
        "update): every this many steps, and always step 0; 0 = step 0 only (and the dense steps below)",
        ge=0,
    )
    dense_until: int = knob(
        20,
        "... and at EVERY step up to and including this one: instabilities (Post-LN's exploding first updates, "
        "early loss spikes) live in the first steps, which a sparse `every` would skip; 0 = off. Costs the "
        'instrumented step\'s extra work at each dense step (docs/metrics.md, "Cost")',
        ge=0,
    )
    histogram_every: int = knob(
        10, "per-layer gradient histograms (W&B only) every `every × histogram_every` steps; 0 = off", ge=0
    )
    histogram_bins: int = knob(64, "bins of each histogram", ge=1)
    rank_every: int = knob(
        10,
        "the token embedding's effective rank (embed/effective_rank: the eigenvalues of a d_model × d_model "
        "Gram matrix, which on a GPU synchronise with the host) every `every × rank_every` steps and at every "
        "dense step; 1 = every instrumented step, 0 = off. The embedding moves slowly; this keeps its cost "
        'below the rest of an instrumented step (docs/metrics.md, "Cost")',
        ge=0,
    )
    model_update: Any = knob(
        "auto",
        "DeepNet's ‖F(x, θ_t) − F(x, θ_0)‖ on a fixed probe batch: auto (runs where a block normalises the "
        "residual stream itself: post and deepnorm, mixln with a Post-LN block, resi_dual) | true | false",
        choices=("auto", True, False),
    )
    probe_batch: int = knob(4, "sequences in that probe batch (validation windows, the same all run)", ge=1)
    layer_ablation: bool = knob(
        False,
        "layer importance at every evaluation: the validation loss with each block skipped (identity), logged as "
        "layer_ablation/layer_i; costs about (depth − 1)/2 evaluations more (false = off)",
    )

    def instrumented(self, step: int) -> bool:
        return step <= self.dense_until or (self.every > 0 and step % self.every == 0)

    def histogram(self, step: int) -> bool:
        period = max(self.every, 1) * self.histogram_every
        return self.histogram_every > 0 and step % period == 0

    def rank(self, step: int) -> bool:
        """Whether the instrumented step `step` measures the embedding's effective rank."""
        if self.rank_every == 0 or not self.instrumented(step):
            return False
        return step <= self.dense_until or step % (max(self.every, 1) * self.rank_every) == 0


def wants_model_update(setting: bool | str, normalises_stream: bool) -> bool:
    """metrics.model_update: true, false, or auto: runs where some block normalises the residual stream
    itself (the model says: `GPT.normalises_stream()`; Post-LN's norm_add: post, and so DeepNorm, mixln's
    first blocks, resi_dual's Post-LN stream), the early updates DeepNet studies."""
    if setting == "auto":
        return normalises_stream
    return bool(setting)


class Instruments:
    """What the instrumented steps measure; `probe` is the fixed batch of the model update (None: not
    measured, see `wants_model_update`)."""

    def __init__(
        self, model: nn.Module, layout: ParamLayout, cfg: InstrumentConfig, probe: torch.Tensor | None
    ) -> None:
        self.cfg = cfg
        self.layout = layout
        self.activation_keys = activation_keys(layout.n_layers)
        self.updates = UpdateRatio(layout)
        self.model_update = ModelUpdateProbe(module_outputs(model), probe) if probe is not None else None
        self.embedding = token_embedding(model)

    def begin(self, step: int) -> StepProbe | None:
        """A probe for this step, or None on the steps that are not instrumented (no cost at all)."""
        return StepProbe(self, step) if self.cfg.instrumented(step) else None

    def state_dict(self) -> dict[str, Any]:
        return {"model_update": self.model_update.state_dict() if self.model_update else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.model_update is not None and state.get("model_update") is not None:
            self.model_update.load_state_dict(state["model_update"])


class StepProbe:
    def __init__(self, instruments: Instruments, step: int) -> None:
        self.instruments = instruments
        self.step = step
        self.keys: list[str] = []
        self.parts: list[torch.Tensor] = []
        self.histograms: dict[str, DeviceHistogram] = {}  # W&B's view; counted on the device
        if instruments.model_update is not None:
            self._add([names.MODEL_UPDATE], instruments.model_update.measure().view(1))
        # the embedding this step starts from, like param_norm
        if instruments.embedding is not None and instruments.cfg.rank(step):
            self._add([names.EMBED_EFFECTIVE_RANK], effective_rank(instruments.embedding).view(1))
        instruments.updates.before()
        self._add(param_norm_keys(instruments.layout.n_layers), instruments.updates.param_norms())
        self._forward_pending = True
        self._activations: torch.Tensor | None = None

    def _add(self, keys: list[str], values: torch.Tensor) -> None:
        self.keys += keys
        self.parts.append(values.float())

    def wants_forward(self) -> bool:
        """True once, for the step's first micro-batch: its forward is the one measured (later
        micro-batches run the plain step)."""
        pending, self._forward_pending = self._forward_pending, False
        return pending

    def record_forward(self, values: torch.Tensor) -> None:
        """The measured forward's activation statistics, laid out as `activation_keys` (what
        `normlab.metrics.activations.activation_values` returns inside the step's graph)."""
        self._activations = values

    def after_backward(self, grads: list[torch.Tensor]) -> None:
        cfg = self.instruments.cfg
        if cfg.histogram(self.step):
            self.histograms = layer_grad_histograms(self.instruments.layout, grads, cfg.histogram_bins)

    def after_update(self, updated: bool) -> None:
        keys = self.instruments.activation_keys
        values = self._activations
        if values is None:  # no forward was measured
            values = torch.full((len(keys),), float("nan"), device=self.parts[-1].device)
        self._add(keys, values)
        if updated:  # no update (max_steps=0) means no ratio, rather than a misleading 0
            self._add(update_ratio_keys(self.instruments.layout.n_layers), self.instruments.updates.ratios())

    def row(self, m: int = 0) -> dict[str, Any]:
        """The step's measurements as host values (one transfer for all scalars); a run alone is member 0."""
        values = torch.cat(self.parts).tolist()
        return {**dict(zip(self.keys, values, strict=True)), **to_host(self.histograms)}
