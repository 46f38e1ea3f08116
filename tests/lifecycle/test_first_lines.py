"""What a CPU run says first: the expected step time, before anything about the data cache."""

from __future__ import annotations


def test_the_step_time_comes_before_the_data_cache(train_cli, tmp_path):
    """A fresh cache: the estimate is the first thing the run says, before building the data cache."""
    result = train_cli(cache=tmp_path / "fresh-cache")
    assert result.code == 0, result.output
    lines = [line for line in result.output.splitlines() if "][normlab" in line]
    assert "expected step time on this CPU" in lines[0], lines[:3]
    said = "\n".join(lines)
    assert said.index("expected step time") < said.index("building the data cache")
