"""Checkpoints: plain contents (weights_only), the newest one of a run directory, and a model mismatch."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from normlab.errors import InvalidConfig, UserError
from normlab.metrics.sinks import JsonlSink
from normlab.summary import OUTCOME_FIELDS, RunSummary
from normlab.train import checkpoint


def plain(value, path="state") -> list[str]:
    """Paths of everything in a checkpoint that is not a tensor or a plain container/scalar."""
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, bool | int | float | str):
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in plain(v, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in plain(v, f"{path}[{i}]")]
    return [f"{path}: {type(value).__name__}"]


def test_a_checkpoint_holds_only_tensors_and_plain_values(trained_run):
    state = torch.load(trained_run / "checkpoints" / "last.pt", weights_only=True)
    assert plain(state) == []
    assert state["step"] == 3 and state[checkpoint.MODEL_CONFIG_KEY]["n_layers"] == 2
    assert {"model", "optimizer", "scaler", "data_rng", "torch_rng", "monitor"} <= set(state)


def with_step(src: Path, dst: Path, step: int) -> None:
    state = torch.load(src, weights_only=True)
    state["step"] = step
    torch.save(state, dst)


def test_the_newest_checkpoint_of_a_run_directory_is_taken(trained_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    assert checkpoint.find_checkpoint(run).path.name == "last.pt"  # step 3 beats step_000002.pt
    with_step(run / "checkpoints" / "last.pt", run / "checkpoints" / "step_000005.pt", 5)
    found = checkpoint.find_checkpoint(run)
    assert (found.path.name, found.step) == ("step_000005.pt", 5)
    assert checkpoint.find_checkpoint(run / "checkpoints").step == 5  # the folder itself works too
    assert checkpoint.find_checkpoint(run / "checkpoints" / "step_000002.pt").step == 2


def test_no_readable_checkpoint_is_one_sentence(trained_run, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    # a directory where no run trained: starting "the run there" again is no way out (issue 39, point 10)
    with pytest.raises(
        UserError, match=r"^No checkpoint in .*pass the run directory of a run that saved one\.$"
    ):
        checkpoint.find_checkpoint(run)
    (run / "metrics.jsonl").write_text('{"step": 0, "loss": 5.0}\n')
    # never circular: the way out it names (train.resume=auto) works for a run that saved no checkpoint
    with pytest.raises(
        UserError, match=r"^No checkpoint in .*train\.resume=auto hydra\.run\.dir=.*from step 0\.$"
    ):
        checkpoint.find_checkpoint(run)
    (run / "checkpoints" / "last.pt").write_bytes(b"garbage")
    with pytest.raises(UserError, match=r"^Every checkpoint in .* is damaged \(.*last\.pt cannot be read"):
        checkpoint.find_checkpoint(run)


def test_a_resume_from_something_neither_a_file_nor_a_directory_names_no_run_directory():
    """train.resume=/dev/zero said "run train.resume=auto hydra.run.dir=/dev/zero" (issue 39, point 10)."""
    with pytest.raises(UserError) as raised:
        checkpoint.find_checkpoint("/dev/zero")
    said = str(raised.value)
    assert said.startswith("train.resume=/dev/zero is neither a checkpoint file nor a directory")
    assert "hydra.run.dir" not in said and said.endswith(
        "pass a run directory that has checkpoints/ or a .pt file."
    )


def test_a_different_model_names_every_differing_key(trained_run):
    found = checkpoint.find_checkpoint(trained_run)
    current = dict(found.state[checkpoint.MODEL_CONFIG_KEY], n_layers=4, d_model=32)
    with pytest.raises(InvalidConfig) as info:
        checkpoint.check_compatible(found, current)
    message = str(info.value)
    assert "depth=2 there, 4 here" in message and "model.d_model=64 there, 32 here" in message
    assert message.endswith("or start afresh without train.resume.")
    assert re.search(r"\. [A-Z]", message) is None  # one sentence
    checkpoint.check_compatible(found, found.state[checkpoint.MODEL_CONFIG_KEY])  # the same: fine


def test_placement_knobs_are_compared_and_older_checkpoints_still_resume(trained_run):
    found = checkpoint.find_checkpoint(trained_run)
    saved = found.state[checkpoint.MODEL_CONFIG_KEY]
    assert saved["placement"] == {"name": "pre"}  # the whole placement group, since placements have knobs
    mixln = dict(saved, placement={"name": "mixln", "post_fraction": 0.5})
    with pytest.raises(
        InvalidConfig,
        match=r"\(placement=pre there, mixln here; placement.post_fraction=null there, 0.5 here\)",
    ):
        checkpoint.check_compatible(found, mixln)
    found.state[checkpoint.MODEL_CONFIG_KEY] = dict(saved, placement="pre")  # saved before: the name only
    checkpoint.check_compatible(found, saved)


def test_deepnorm_settings_compare_as_the_norm_is_built(trained_run):
    """DeepNorm's eps and bias default to null (its base norm's own) since issue 31; checkpoints written
    before recorded LayerNorm's values (1e-5, a bias). Those build the same norm and resume; a base norm whose
    own eps differs (RMSNorm: 1e-6) is another model and is refused."""
    found = checkpoint.find_checkpoint(trained_run)
    saved = found.state[checkpoint.MODEL_CONFIG_KEY]
    old = {"name": "deepnorm", "base": "ln", "eps": 1e-5, "bias": True}
    found.state[checkpoint.MODEL_CONFIG_KEY] = dict(saved, norm=old)
    checkpoint.check_compatible(
        found, dict(saved, norm={"name": "deepnorm", "base": "ln", "eps": None, "bias": None})
    )
    found.state[checkpoint.MODEL_CONFIG_KEY] = dict(saved, norm={**old, "base": "rms"})
    with pytest.raises(InvalidConfig, match=r"model\.norm\.eps=1e-05 there, 1e-06 here"):
        checkpoint.check_compatible(
            found, dict(saved, norm={"name": "deepnorm", "base": "rms", "eps": None, "bias": None})
        )


def test_a_checkpoint_without_a_model_config_still_fails_in_one_sentence(trained_run):
    from normlab.model import GPT

    found = checkpoint.find_checkpoint(trained_run)
    del found.state[checkpoint.MODEL_CONFIG_KEY]
    checkpoint.check_compatible(found, {})  # nothing to compare: the state dict decides
    model = GPT(512, 64, 64, 4, 3, {"name": "ln", "eps": 1e-5}, "pre")
    with pytest.raises(InvalidConfig, match=r"^The checkpoint .* does not fit this model \("):
        checkpoint.load_model_state(model, found)


def test_resuming_the_metrics_file_drops_later_rows_and_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "loss": 1.0}) for s in range(6)]
    path.write_text("\n".join(rows) + '\n{"step": 6, "lo')  # killed in the middle of a line
    sink = JsonlSink(path, resume_step=4)
    sink.log({"step": 4, "loss": 2.0})
    sink.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 3, 4]
    assert [r["step"] for r in sink.kept] == [0, 1, 2, 3]


def test_the_summary_schema(tmp_path):

    for contract in (
        "status",
        "reason",
        "steps",
        "baseline_unigram_loss",
        "learned",
        "spike_watch_start",
        "mfu",
    ):
        assert contract in OUTCOME_FIELDS
    summary = RunSummary().update(status="completed", steps=3, final_val_loss=float("nan"))
    summary.write(tmp_path)
    back = RunSummary.read(tmp_path)
    assert (back.status, back.steps, back.final_val_loss, back.learned) == ("completed", 3, "nan", None)
    with pytest.raises(TypeError, match="declare them in summary.py"):
        summary.update(not_a_field=1)
