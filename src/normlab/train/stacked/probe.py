"""The instrumented steps of a stack: every measurement of normlab.metrics.instruments, per member, with
the same keys in the same order, so that member m's row is the row its run alone writes.

All of it is computed on the stack at once and stays on the device as one (members × keys) table until the
rows are made (one host transfer for every member): the activations and attention logits from the GPT's
probed forward under vmap (`features(idx, probe=True)` returns them: a pure function, so vmap gives every
member its own), laid out by the single run's `activation_values` with the head's statistics from the
stacked head, parameter norms and update ratios from the (members × parameters) buffer, the embedding's effective
rank as `torch.vmap` of the single run's function, the model update as a vmapped evaluation forward of
the fixed probe batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from normlab.metrics import names
from normlab.metrics.activations import LogitStats, activation_keys, activation_values
from normlab.metrics.embedding import effective_rank
from normlab.metrics.histograms import DeviceHistogram, layer_grad_histograms, to_host
from normlab.metrics.instruments import InstrumentConfig
from normlab.metrics.layout import ParamLayout
from normlab.metrics.model_update import ModelUpdateProbe
from normlab.metrics.updates import param_norm_keys, update_ratio_keys
from normlab.model.blocks import ForwardTaps
from normlab.train.stacked.model import StackedModel


def probed_features(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the head reads, and the blocks' measurements (ForwardTaps' two fields)."""
    hidden, taps = model.features(x, probe=True)
    return hidden, taps.stream_rms, taps.attn_max_logit


def forward_values(
    stream_rms: torch.Tensor, attn_max_logit: torch.Tensor, hidden: torch.Tensor, stats: torch.Tensor
) -> torch.Tensor:
    """Every member's `activation_values` (members, activation keys) from the stacked probed forward
    (`probed_features` under vmap), what the head read and StackedHead's logit statistics (max, mean, log Z):
    pure tensor operations, part of the compiled instrumented step."""
    return torch.vmap(_activation_values)(
        stream_rms.detach(), attn_max_logit.detach(), hidden.detach(), stats[:, 0], stats[:, 1], stats[:, 2]
    )


def _activation_values(
    stream_rms: torch.Tensor,
    attn_max_logit: torch.Tensor,
    hidden: torch.Tensor,
    logit_max: torch.Tensor,
    logit_mean: torch.Tensor,
    log_z: torch.Tensor,
) -> torch.Tensor:
    """One member's `activation_values` (under vmap: every member's)."""
    stats = LogitStats(max=logit_max, mean=logit_mean, mean_log_z=log_z)
    return activation_values(ForwardTaps(stream_rms, attn_max_logit), hidden, stats)


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).float()


class StackedInstruments:
    """`probe` is the model update's fixed batch (None: not measured); `histograms[m]` says whether member m
    wants gradient histograms (only W&B shows them)."""

    def __init__(
        self,
        model: StackedModel,
        layout: ParamLayout,
        cfg: InstrumentConfig,
        probe: torch.Tensor | None,
        histograms: list[bool],
    ) -> None:
        self.model, self.layout, self.cfg, self.probe = model, layout, cfg, probe
        self.histograms = histograms
        # DeepNet's ‖F(x, θ_t) − F(x, θ_0)‖, every member against its own θ_0 (the probe a run alone uses)
        self.model_update = ModelUpdateProbe(self._outputs, probe) if probe is not None else None
        self.activation_keys = activation_keys(layout.n_layers)

    def begin(self, step: int) -> StackedProbe | None:
        return StackedProbe(self, step) if self.cfg.instrumented(step) else None

    @torch.no_grad()
    def _outputs(self, x: torch.Tensor) -> torch.Tensor:
        """Every member's logits on the probe batch `x`, in evaluation mode (the model update's F)."""
        was_training = self.model.template.training
        self.model.train(False)
        try:
            return self.model.map(_logits, x, shared=(True,))
        finally:
            self.model.train(was_training)

    def member_state_dict(self, m: int) -> dict[str, Any]:
        """Member m's `Instruments.state_dict()`, as its run alone saves it."""
        return {"model_update": self.model_update.member_state_dict(m) if self.model_update else None}

    def load_member_states(self, states: list[dict[str, Any] | None]) -> None:
        """Each member's saved `Instruments` state (None: a checkpoint from before instrumentation)."""
        if self.model_update is not None:
            self.model_update.load_member_states([(s or {}).get("model_update") for s in states])


class StackedProbe:
    """One instrumented step of the stack; `row(m)` is member m's part of the row."""

    def __init__(self, instruments: StackedInstruments, step: int) -> None:
        self.instruments = instruments
        self.step = step
        model, layout = instruments.model, instruments.layout
        self.keys: list[str] = []
        self.parts: list[torch.Tensor] = []
        self.histograms: list[dict[str, DeviceHistogram]] = [{} for _ in range(model.size)]
        self._host: list[list[float]] | None = None
        if instruments.model_update is not None:
            self._add([names.MODEL_UPDATE], instruments.model_update.measure().view(-1, 1))
        if instruments.cfg.rank(step):  # the embedding this step starts from, like param_norm
            with torch.no_grad():
                rank = torch.vmap(effective_rank)(model.token_embedding().detach())
            self._add([names.EMBED_EFFECTIVE_RANK], rank.view(-1, 1))
        self._before = model.flat.detach().clone()
        self._before_sq = model.squared_norms(self._before)
        self._add(param_norm_keys(layout.n_layers), self._param_norms())
        self._activations: torch.Tensor | None = None

    def _add(self, keys: list[str], values: torch.Tensor) -> None:
        self.keys += keys
        self.parts.append(values.float())

    def _param_norms(self) -> torch.Tensor:
        sq = self._before_sq
        return torch.cat([sq.sum(1, keepdim=True), self.instruments.layout.layer_sums(sq)], 1).sqrt()

    def record_forward(self, values: torch.Tensor) -> None:
        """The measured forward's activation statistics, (members, activation keys): `forward_values`."""
        self._activations = values.detach().float()

    def after_backward(self, grads: dict[str, torch.Tensor]) -> None:
        """Gradient histograms of the members that show them (W&B), from each member's gradients."""
        inst = self.instruments
        if not inst.cfg.histogram(self.step):
            return
        for m, wanted in enumerate(inst.histograms):
            if wanted:
                own = [grads[name][m] for name in inst.model.names]
                self.histograms[m] = layer_grad_histograms(inst.layout, own, inst.cfg.histogram_bins)

    def after_update(self, updated: bool) -> None:
        inst = self.instruments
        values = self._activations
        if values is None:  # no forward was measured
            values = torch.full(
                (inst.model.size, len(inst.activation_keys)), float("nan"), device=inst.model.device
            )
        self._add(inst.activation_keys, values)
        if updated:
            diff_sq = inst.model.squared_norms(inst.model.flat.detach() - self._before)
            num = torch.cat([diff_sq.sum(1, keepdim=True), inst.layout.layer_sums(diff_sq)], 1).sqrt()
            self._add(update_ratio_keys(inst.layout.n_layers), num / self._param_norms().clamp_min(1e-12))
        self._before = None  # type: ignore[assignment]

    def row(self, m: int = 0) -> dict[str, Any]:
        """Member m's part of the row: its values (every member's moved to the host once) and histograms."""
        if self._host is None:
            self._host = torch.cat(self.parts, 1).tolist()
        values = self._host[m]
        return {**dict(zip(self.keys, values, strict=True)), **to_host(self.histograms[m])}
