"""The spike rule on crafted sequences, and the forensics it writes."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from normlab.metrics import names
from normlab.metrics.monitor import Monitor
from normlab.metrics.spikes import SpikeConfig, SpikeDetector, find_spikes


def noisy(n: int, seed: int = 0, level: float = 3.0, noise: float = 0.05) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, noise) for _ in range(n)]


def test_finds_exactly_the_injected_spikes():
    values = noisy(1000)
    injected = [150, 400, 401, 777]
    for i in injected:
        values[i] += 2.0  # 40 σ of the noise
    assert find_spikes(values, window=100, sigma=6) == injected


def test_no_spike_before_the_window_has_filled():
    values = noisy(300)
    values[50] += 5.0
    values[200] += 5.0
    assert find_spikes(values, window=100, sigma=6) == [200]


def test_threshold_is_mean_plus_sigma_population_std():
    window = [1.0, 2.0, 3.0, 4.0]  # mean 2.5, population std √1.25
    threshold = 2.5 + 2 * math.sqrt(1.25)
    for value, is_spike in [(threshold - 1e-9, False), (threshold + 1e-9, True)]:
        det = SpikeDetector(window=4, sigma=2)
        for v in window:
            assert det.update(v) is None
        spike = det.update(value)
        assert (spike is not None) == is_spike
    spike = SpikeDetector(window=4, sigma=2)
    for v in window:
        spike.update(v)
    found = spike.update(10.0)
    assert found.mean == pytest.approx(2.5) and found.std == pytest.approx(math.sqrt(1.25))
    assert found.z == pytest.approx((10 - 2.5) / math.sqrt(1.25))


def test_the_window_is_the_previous_values_spikes_included():
    # a jump from 3 to 10 spikes while few new values are in the window, then stops: with k values of 10
    # among 100, mean = 3 + 7k/100 and std = 7·√(k/100·(1 − k/100)), so the threshold mean + 6·std is
    # 7.25, 9.02, 10.37 for k = 1, 2, 3
    values = noisy(100) + noisy(150, seed=1, level=10.0)
    assert find_spikes(values, window=100, sigma=6) == [100, 101, 102]


def test_dips_and_non_finite_values_are_not_spikes():
    values = noisy(200)
    values[150] -= 5.0
    values[160] = float("nan")
    values[170] = float("inf")
    assert find_spikes(values, window=100, sigma=6) == []


def test_window_zero_turns_the_detector_off():
    assert find_spikes([1.0] * 10 + [1e9], window=0, sigma=6) == []


def row(step: int, loss: float, grad_norm: float, layers: list[float]) -> dict:
    r = {names.STEP: step, names.LOSS: loss, names.GRAD_NORM: grad_norm}
    r.update({names.grad_norm_layer(i): g for i, g in enumerate(layers)})
    return r


def test_monitor_marks_events_counts_and_writes_forensics(tmp_path):
    monitor = Monitor(SpikeConfig(window=20, sigma=6, history=5), out_dir=tmp_path, n_layers=3)
    monitor.locate = lambda state: [[int(state), int(state) + 1]]  # stands in for the trainer's replay
    loss, grad = noisy(60, seed=2), noisy(60, seed=3, level=1.0, noise=0.01)
    rows = []
    for step in range(60):
        layers = [0.5, 0.5, 0.5]
        if step == 30:
            loss[step] += 3.0
        if step == 45:
            grad[step] += 5.0
            layers = [0.5, 4.0, 0.6]  # the culprit is block 1
        r = row(step, loss[step], grad[step], [g + 0.001 * step for g in layers])
        assert monitor.observe(r, data_state=step * 10) is None
        rows.append(r)
    assert rows[30][names.SPIKE_LOSS] == 1 and names.SPIKE_GRAD_NORM not in rows[30]
    assert rows[45][names.SPIKE_GRAD_NORM] == 1 and names.SPIKE_LOSS not in rows[45]
    assert not any(
        names.SPIKE_LOSS in r or names.SPIKE_GRAD_NORM in r for i, r in enumerate(rows) if i not in (30, 45)
    )
    assert monitor.summary() == {
        "n_spikes": 2,
        "spike_steps": [30, 45],
        "n_loss_spikes": 1,
        "n_grad_norm_spikes": 1,
    }
    report = json.loads((tmp_path / "spikes" / "step_45.json").read_text())
    assert report["step"] == 45 and set(report["spikes"]) == {names.GRAD_NORM}
    assert report["spikes"][names.GRAD_NORM]["value"] == pytest.approx(grad[45])
    assert [h[names.STEP] for h in report["history"]] == [41, 42, 43, 44, 45]
    assert report["history"][-1]["batch_starts"] == [[450, 451]]
    assert report["suspect_layer"]["layer"] == 1
    assert (tmp_path / "spikes" / "step_30.json").exists()


def test_monitor_state_survives_a_checkpoint(tmp_path):
    a = Monitor(SpikeConfig(window=10, sigma=6), n_layers=1)
    values = noisy(40, seed=4)
    values[35] += 2.0
    for step, v in enumerate(values[:20]):
        a.observe(row(step, v, 1.0, [1.0]))
    b = Monitor(SpikeConfig(window=10, sigma=6), n_layers=1)
    b.load_state_dict(a.state_dict())
    for step, v in enumerate(values[20:], start=20):
        a.observe(row(step, v, 1.0, [1.0]))
        b.observe(row(step, v, 1.0, [1.0]))
    assert a.summary() == b.summary() and b.summary()["spike_steps"] == [35]


def test_replaying_the_data_rng_recovers_the_batch_positions(make_gpt, make_trainer, tokens):
    trainer = make_trainer(make_gpt(), train={"grad_accum": 2})
    trainer.batch(tokens, trainer.data_rng)  # move the stream along a little
    state = trainer.data_rng.get_state()
    batches = [trainer.batch(tokens, trainer.data_rng)[0] for _ in range(2)]
    starts = trainer.window_starts(state)
    assert len(starts) == 2
    for x, micro in zip(batches, starts, strict=True):
        expected = torch.stack([torch.from_numpy(tokens[s : s + 16].astype("int64")) for s in micro])
        assert torch.equal(x, expected)
