"""train.compile: compiles where Inductor can, falls back with one sentence where there is no C++ compiler."""

import logging

import pytest
import torch

from normlab.train import compile as compile_mod


def test_without_a_cpp_compiler_the_module_runs_uncompiled(monkeypatch, caplog):
    monkeypatch.setattr(compile_mod, "cpp_compiler", lambda: None)
    module = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING, logger="normlab"):
        assert compile_mod.compile_module(module, torch.device("cpu")) is module
    (record,) = caplog.records
    assert "no" in record.message and "install g++" in record.message and record.message.endswith(".")


def test_with_a_compiler_it_is_torch_compile(monkeypatch):
    monkeypatch.setattr(compile_mod, "cpp_compiler", lambda: "g++")
    module = torch.nn.Linear(2, 2)
    assert compile_mod.compile_module(module, torch.device("cpu")) is not module


@pytest.mark.slow
@pytest.mark.skipif(compile_mod.cpp_compiler() is None, reason="no C++ compiler for Inductor")
def test_compiled_training_matches_eager(make_cfg, tmp_path):
    """A few steps with train.compile=true give the eager losses to float tolerance, with the same
    measurements on instrumented steps; the compiled graphs are two (the plain step and the instrumented
    one, whose forward returns its measurements), and neither instrumentation nor evaluation forces a
    recompilation after the first steps."""
    import json

    import torch._dynamo

    from normlab.train.run import Run

    runs = {}
    for flag in (False, True):
        torch._dynamo.reset()
        out = tmp_path / str(flag)
        Run(
            make_cfg(
                "train.max_steps=12", "metrics.every=5", "metrics.dense_until=2", f"train.compile={flag}"
            ),
            out,
        ).execute()
        runs[flag] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        if flag:
            frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            assert frames == 2, f"{frames} graphs compiled: instrumentation or evaluation forced recompiles"
    losses = {flag: [r["loss"] for r in rows if "loss" in r] for flag, rows in runs.items()}
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    measured = {
        flag: [r["act_rms/layer_0"] for r in rows if "act_rms/layer_0" in r] for flag, rows in runs.items()
    }
    assert len(measured[True]) >= 3 and measured[True] == pytest.approx(measured[False], rel=1e-4)
