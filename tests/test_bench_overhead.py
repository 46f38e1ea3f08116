"""The overhead benchmark's classification of steps (the script itself runs in test_bench_scripts)."""

from normlab.bench.overhead import step_kind


def test_the_overhead_benchmark_counts_dense_steps_as_instrumented():
    """The trainer instruments every step up to metrics.dense_until (InstrumentConfig.instrumented); the
    benchmark's per-kind medians must put those steps with the instrumented ones, not the plain ones."""
    metrics = {"every": 10, "dense_until": 20, "histogram_every": 10}
    kinds = [step_kind(s, metrics) for s in range(0, 41)]
    assert kinds[0] == "histogram"  # step 0: every × histogram_every divides it
    assert all(k == "instrumented" for k in kinds[1:21])  # the dense start
    assert [s for s in range(21, 41) if kinds[s] != "plain"] == [30, 40]
