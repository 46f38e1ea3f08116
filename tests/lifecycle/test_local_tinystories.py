"""A local TinyStories copy in an official layout trains with `data=tinystories data.path=DIR` alone: the
files are recognised by their names (generated stories in that layout, never TinyStories' own text)."""

from __future__ import annotations

import pytest
from data_helpers import write_layout


@pytest.mark.parametrize(("layout", "found"), [("v1txt", "V1"), ("v2txt", "V2")])
def test_official_layout_trains_without_data_version(train_cli, tmp_path, layout, found):
    root = tmp_path / "TinyStories"
    write_layout(root, layout, n_train=300, n_val=30, seed=11)
    result = train_cli("data=tinystories", f"data.path={root}", cache=tmp_path / "cache")
    assert result.code == 0, result.output
    assert result.summary["status"] == "completed" and result.summary["steps"] > 0
    said = [line for line in result.output.splitlines() if "data=tinystories: using" in line]
    assert len(said) == 1 and f"the official TinyStories {found} text files" in said[0], result.output
    assert said[0].endswith("(recognised by their names)")
