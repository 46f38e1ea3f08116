"""The spike rule on crafted sequences, and the forensics it writes."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from normlab.metrics import names
from normlab.metrics.monitor import Monitor
from normlab.metrics.spikes import SpikeConfig, SpikeDetector


def find_spikes(values: list[float], window: int, sigma: float, trend: int, min_history: int) -> list[int]:
    """Indices of the spikes in a whole series: the detector run from the start, as training runs it."""
    detector = SpikeDetector(window, sigma, trend, min_history)
    return [i for i, v in enumerate(values) if detector.update(v) is not None]


def noisy(n: int, seed: int = 0, level: float = 3.0, noise: float = 0.05) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, noise) for _ in range(n)]


def falling(n: int, seed: int = 0, noise: float = 0.02) -> list[float]:
    """A loss curve shaped like a training run's: fast fall from ln(1024) ≈ 6.9 towards 2.5, with noise."""
    rng = random.Random(seed)
    return [2.5 + 4.4 * math.exp(-t / 40) + rng.gauss(0, noise) for t in range(n)]


def test_finds_exactly_the_injected_spikes():
    values = noisy(1000)
    injected = [150, 400, 401, 777]
    for i in injected:
        values[i] += 2.0  # 40 σ of the noise
    assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == injected


def test_an_early_spike_on_a_falling_loss_curve_is_found():
    # at step 20 the curve is at 5.5 and falling by 0.08 per step; a jump of 0.5 (9 %) is a spike
    values = falling(300)
    values[20] += 0.5
    assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == [20]
    # OLMo's rule on the raw values cannot see it: nothing is tested before a full window
    assert olmo_rule(values, window=100, sigma=6) == []


def test_a_spike_on_the_descent_is_found_where_the_raw_window_misses_it():
    # a slower descent: at step 150 the raw window (steps 50–149) spans 4.6 → 3.9, so its std (0.2) is the
    # trend's, and mean + 6 std is far above a 0.5 jump; the ratio to the running median is not fooled
    rng = random.Random(3)
    values = [2.5 + 4.4 * math.exp(-t / 300) + rng.gauss(0, 0.02) for t in range(400)]
    values[150] += 0.5
    assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == [150]
    assert olmo_rule(values, window=100, sigma=6) == []


@pytest.mark.parametrize("seed", range(20))
def test_no_false_alarm_on_a_smooth_falling_curve_with_noise(seed):
    # 20 curves × 500 steps, noise 0.02–0.1 nats: the rule must stay quiet (grad norms too: log-normal noise)
    assert (
        find_spikes(
            falling(500, seed=seed, noise=0.02 + 0.004 * seed), window=100, sigma=6, trend=5, min_history=10
        )
        == []
    )
    rng = random.Random(seed)
    grad = [(0.3 + 2 * math.exp(-t / 60)) * math.exp(rng.gauss(0, 0.1)) for t in range(500)]
    assert find_spikes(grad, window=100, sigma=6, trend=5, min_history=10) == []


def test_the_first_tested_value_is_trend_plus_min_history():
    assert SpikeConfig.from_config().watch_start == 15
    assert SpikeConfig.from_config(trend=3, min_history=4).watch_start == 7
    assert SpikeConfig.from_config(window=0).watch_start is None
    for at, found in ((14, []), (15, [15])):
        values = noisy(100)
        values[at] += 2.0
        assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == found


def test_threshold_by_hand():
    # trend = 3, min_history = 4, window = 4, sigma = 2. Values 10, 10, 10 give no ratio yet (the median
    # needs 3 earlier values); then 10, 11, 9, 10 give ratios 1, 1.1, 0.9, 1 (medians of 10,10,10 /
    # 10,10,10 / 10,10,11 / 10,11,9 are all 10). Window of ratios: mean 1, population std √0.005.
    # The next value's median is median(11, 9, 10) = 10, so it is a spike iff v/10 > 1 + 2·√0.005.
    prefix = [10.0, 10.0, 10.0, 10.0, 11.0, 9.0, 10.0]
    threshold = 10 * (1 + 2 * math.sqrt(0.005))  # 11.414
    for value, is_spike in [(threshold - 1e-6, False), (threshold + 1e-6, True)]:
        det = SpikeDetector(window=4, sigma=2, trend=3, min_history=4)
        assert all(det.update(v) is None for v in prefix)
        found = det.update(value)
        assert (found is not None) == is_spike
    det = SpikeDetector(window=4, sigma=2, trend=3, min_history=4)
    for v in prefix:
        det.update(v)
    found = det.update(15.0)
    assert found.trend == 10 and found.ratio == pytest.approx(1.5)
    assert found.mean == pytest.approx(1.0) and found.std == pytest.approx(math.sqrt(0.005))
    assert found.threshold == pytest.approx(threshold)
    assert found.z == pytest.approx(0.5 / math.sqrt(0.005))


def test_a_new_level_counts_until_the_median_reaches_it():
    # a jump from 3 to 10 divides by the median of the 5 values before: 3 while at most 2 of them are 10
    # (steps 100, 101, 102: ratio ≈ 3.3, each above the window's mean + 6 std even with the earlier ones
    # in it), then 10 (ratio ≈ 1): the new level is the baseline
    values = noisy(100) + noisy(150, seed=1, level=10.0)
    assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == [100, 101, 102]


def test_dips_and_non_finite_values_are_not_spikes():
    values = noisy(200)
    values[150] -= 5.0
    values[160] = float("nan")
    values[170] = float("inf")
    assert find_spikes(values, window=100, sigma=6, trend=5, min_history=10) == []


def test_window_zero_turns_the_detector_off():
    assert find_spikes([1.0] * 10 + [1e9], window=0, sigma=6, trend=5, min_history=10) == []


def olmo_rule(values: list[float], window: int, sigma: float) -> list[int]:
    """OLMo-core's StabilityMonitorCallback rule on the raw values (full window, mean + sigma · std)."""
    found = []
    for i in range(window, len(values)):
        prev = values[i - window : i]
        mean = sum(prev) / window
        std = math.sqrt(sum((v - mean) ** 2 for v in prev) / window)
        if std > 1e-10 and values[i] > mean + sigma * std:
            found.append(i)
    return found


def row(step: int, loss: float, grad_norm: float, layers: list[float]) -> dict:
    r = {names.STEP: step, names.LOSS: loss, names.GRAD_NORM: grad_norm}
    r.update({names.grad_norm_layer(i): g for i, g in enumerate(layers)})
    return r


def test_monitor_marks_events_counts_and_writes_forensics(tmp_path):
    spikes = SpikeConfig.from_config(window=20, sigma=6, history=5)
    monitor = Monitor(spikes, out_dir=tmp_path, n_layers=3)
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
        assert monitor.observe(r, batch_starts=lambda s=step * 10: [[s, s + 1]]) is None
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
        "spike_watch_start": 15,
    }
    report = json.loads((tmp_path / "spikes" / "step_45.json").read_text())
    assert report["step"] == 45 and set(report["spikes"]) == {names.GRAD_NORM}
    assert report["spikes"][names.GRAD_NORM]["value"] == pytest.approx(grad[45])
    assert [h[names.STEP] for h in report["history"]] == [41, 42, 43, 44, 45]
    assert report["history"][-1]["batch_starts"] == [[450, 451]]
    assert report["suspect_layer"]["layer"] == 1
    assert (tmp_path / "spikes" / "step_30.json").exists()


def test_monitor_state_survives_a_checkpoint(tmp_path):
    a = Monitor(SpikeConfig.from_config(window=10, sigma=6), n_layers=1)
    values = noisy(40, seed=4)
    values[35] += 2.0
    for step, v in enumerate(values[:20]):
        a.observe(row(step, v, 1.0, [1.0]))
    b = Monitor(SpikeConfig.from_config(window=10, sigma=6), n_layers=1)
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
