"""Watches every metrics row on the host: spike events, divergence, and the forensics history.

Runs where the rows reach the host (the trainer's flush), so it adds no device sync. The last
`spikes.history` rows are kept with the data-RNG state each step started from; when a spike fires, they
are written to `spikes/step_{n}.json` with the positions of every training window the steps read, so a
spike can be traced to a layer and to the data. A divergence writes the same history to `divergence.json`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from normlab.io import write_json_atomic
from normlab.metrics import names
from normlab.metrics.divergence import DivergenceConfig, DivergenceRule
from normlab.metrics.sinks import json_safe, scalar
from normlab.metrics.spikes import Spike, SpikeConfig, SpikeDetector

SPIKES_DIR = "spikes"
DIVERGENCE_FILE = "divergence.json"
MAX_SPIKE_REPORTS = 100  # spikes/step_{n}.json files per run; later spikes are still counted and logged

# for each micro-batch of a step, the start offsets of its windows in the training stream (the trainer
# replays its data RNG to know them; computed only when a report is written)
BatchStarts = Callable[[], list[list[int]]]


def scalars(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able scalar entries of a row (histograms and other objects dropped)."""
    return {k: json_safe(v) for k, v in row.items() if scalar(v)}


def suspect_layer(history: list[dict[str, Any]], n_layers: int) -> dict[str, Any] | None:
    """The block whose gradient norm grew most at the last row, relative to its mean over the rows before.

    A ratio, not the largest norm: layers have different typical gradient norms.
    """
    if len(history) < 2 or names.grad_norm_layer(0) not in history[-1]:
        return None
    ratios = {}
    for i in range(n_layers):
        key = names.grad_norm_layer(i)
        before = [r[key] for r in history[:-1] if isinstance(r.get(key), float)]
        mean = sum(before) / len(before) if before else 0.0
        if mean > 0:
            ratios[i] = history[-1][key] / mean
    if not ratios:
        return None
    layer = max(ratios, key=ratios.__getitem__)
    return {"layer": layer, "grad_norm_ratio": ratios[layer], "grad_norm_ratio_by_layer": ratios}


class Monitor:
    """Spike detectors for loss and grad_norm, the divergence rule, and the forensics history of one run.

    `out_dir` None keeps everything in memory (no report files, no data states recorded).
    """

    def __init__(
        self,
        spikes: SpikeConfig | None = None,
        divergence: DivergenceConfig | None = None,
        out_dir: Path | None = None,
        n_layers: int = 0,
    ) -> None:
        self.spikes = spikes or SpikeConfig.from_config()
        self.divergence = DivergenceRule(divergence or DivergenceConfig.from_config())
        self.out_dir = out_dir
        self.n_layers = n_layers
        cfg = self.spikes
        self.detectors = {
            s: SpikeDetector(cfg.window, cfg.sigma, cfg.trend, cfg.min_history) for s in names.SPIKE_SERIES
        }
        self.history: deque[tuple[dict[str, Any], BatchStarts | None]] = deque(
            maxlen=max(self.spikes.history, 1)
        )
        self.spike_steps: list[int] = []
        self.counts = dict.fromkeys(names.SPIKE_SERIES, 0)

    @property
    def writes_reports(self) -> bool:
        """Whether spike and divergence reports are written (and the trainer should say where batches came
        from)."""
        return self.out_dir is not None

    def observe(self, row: dict[str, Any], batch_starts: BatchStarts | None = None) -> str | None:
        """Check one training row (in step order): marks spike events in `row`; returns a divergence reason.
        `batch_starts` tells, if a report needs it, where the step's training windows came from."""
        self.history.append((row, batch_starts))
        step = row[names.STEP]
        reason = self.divergence.check(step, row[names.LOSS], row[names.GRAD_NORM])
        if reason is not None:
            self._write(self.out_dir / DIVERGENCE_FILE if self.out_dir else None, {"reason": reason}, step)
            return reason
        found: dict[str, Spike] = {}
        for series, event in names.SPIKE_SERIES.items():
            spike = self.detectors[series].update(row[series])
            if spike is not None:
                row[event] = 1
                found[series] = spike
                self.counts[series] += 1
        if found:
            self.spike_steps.append(step)
            if len(self.spike_steps) <= MAX_SPIKE_REPORTS and self.out_dir is not None:
                report = {
                    "spikes": {s: {**asdict(sp), "z": sp.z} for s, sp in found.items()},
                    "rule": {
                        "window": self.spikes.window,
                        "sigma": self.spikes.sigma,
                        "trend": self.spikes.trend,
                        "min_history": self.spikes.min_history,
                    },
                }
                self._write(self.out_dir / SPIKES_DIR / f"step_{step}.json", report, step)
        return None

    def _write(self, path: Path | None, head: dict[str, Any], step: int) -> None:
        if path is None:
            return
        rows = []
        for row, batch_starts in self.history:
            entry = scalars(row)
            if batch_starts is not None:
                entry["batch_starts"] = batch_starts()
            rows.append(entry)
        report = {
            names.STEP: step,
            **head,
            "suspect_layer": suspect_layer([r for r, _ in self.history], self.n_layers),
            "history": rows,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, report, indent=1)

    def summary(self) -> dict[str, Any]:
        """The spike fields of summary.json."""
        return {
            "n_spikes": len(self.spike_steps),
            "spike_steps": list(self.spike_steps),
            "n_loss_spikes": self.counts[names.LOSS],
            "n_grad_norm_spikes": self.counts[names.GRAD_NORM],
            "spike_watch_start": self.spikes.watch_start,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "detectors": {s: d.state_dict() for s, d in self.detectors.items()},
            "divergence": self.divergence.state_dict(),
            "spike_steps": list(self.spike_steps),
            "counts": dict(self.counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for s, d in self.detectors.items():
            d.load_state_dict(state["detectors"][s])
        self.divergence.load_state_dict(state["divergence"])
        self.spike_steps = list(state["spike_steps"])
        self.counts = dict(state["counts"])
