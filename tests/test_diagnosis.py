"""normlab.train.diagnosis: the known failures named before training, and the cause named after it.

The configs are composed as `python train.py` composes them (the issue's newcomer commands), so the rules are
checked against the settings a user actually gets; the after-training causes against crafted summaries whose
numbers support one cause and contradict the others.
"""

from __future__ import annotations

import pytest

from normlab.config import checked
from normlab.config.compose import compose_config
from normlab.train import diagnosis


def compose(overrides: list[str]) -> dict:
    """The checked, resolved config `python train.py OVERRIDES` runs with."""
    return checked(compose_config(["data=synthetic", *overrides]))


NEWCOMER = ["data=synthetic", "model=tiny", "train.max_steps=150", "warmup_steps=20"]


def rules(overrides: list[str]) -> list[str]:
    return [n.rule for n in diagnosis.preflight(compose(overrides))]


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["placement=post", *NEWCOMER], ["tied_embeddings"]),
        (["norm=deepnorm", "placement=post", *NEWCOMER], ["tied_embeddings"]),
        (["placement=mixln", *NEWCOMER], ["tied_embeddings"]),
        (["placement=pre", *NEWCOMER], []),
        (["placement=post", "model.tie_embeddings=false", *NEWCOMER], []),
        (["placement=post", "model.init=xavier", *NEWCOMER], []),
        (["placement=post", "model.embed_scale=sqrt_d", *NEWCOMER], []),
        (["norm=none", "placement=post", *NEWCOMER], []),  # no norm: the same network as pre
        # the default warm-up (100) over a 40-step run
        (["placement=pre", "data=synthetic", "model=tiny", "train.max_steps=40"], ["warmup_covers_run"]),
        (["placement=pre", "warmup_steps=1000", "train.max_steps=10"], ["warmup_covers_run"]),
        (["placement=pre", "warmup_steps=10", "train.max_steps=10"], ["warmup_covers_run"]),
        (["placement=pre", "warmup_steps=9", "train.max_steps=10"], []),
        (["placement=pre", "train.max_steps=0"], []),  # the step-0 profile: no update, nothing to warm up
        (["norm=bn", "placement=pre", "train.batch_size=4"], ["batchnorm_small_batch"]),
        (["norm=bn", "placement=pre", "train.batch_size=8"], []),
    ],
)
def test_preflight_names_the_known_failure(overrides, expected):
    assert rules(overrides) == expected


def test_preflight_sentences_name_the_override_that_avoids_it():
    tied, warm = diagnosis.preflight(compose(["placement=post", "train.max_steps=40", "warmup_steps=100"]))
    assert "model.tie_embeddings=false" in tied.sentence and "finding 10" in tied.sentence
    # lr_at: the 40th warm-up step of 100 uses 40/100 of the peak
    assert "warmup_steps=100 ≥ train.max_steps=40" in warm.sentence
    assert "lr 0.0012, 40% of optim.lr=0.003" in warm.sentence
    assert "lower warmup_steps (e.g. warmup_steps=4) or raise train.max_steps" in warm.sentence


def test_value_reads_nested_and_flattened_configs():
    nested = {"model": {"init": "gpt2"}, "norm": {"name": "ln"}}
    flat = {"model.init": "gpt2", "norm.name": "ln", "norm": "ln"}
    for cfg in (nested, flat):
        assert diagnosis.value(cfg, "model.init") == "gpt2"
        assert diagnosis.value(cfg, "norm") == "ln"
        assert diagnosis.value(cfg, "model.missing", 7) == 7


def summary(**fields):
    return {"status": "completed", "learned": False, "steps": 150, "baseline_unigram_loss": 5.683, **fields}


def falling(n: int, start: float, stop: float) -> list[float]:
    return [start + (stop - start) * i / (n - 1) for i in range(n)]


def test_cause_never_left_warmup_is_not_told_to_lower_the_learning_rate():
    cfg = compose(["placement=pre", "data=synthetic", "model=tiny", "train.max_steps=40"])
    note = diagnosis.cause(cfg, summary(steps=40, best_val_loss=6.58), falling(40, 7.0, 6.5))
    assert note.rule == "warmup_covers_run"
    assert "lower warmup_steps or raise train.max_steps" in note.sentence
    assert "lower learning rate would only slow it further" in note.sentence


def test_cause_names_tied_embeddings_for_a_post_ln_run_at_the_unigram_plateau():
    cfg = compose(["placement=post", *NEWCOMER])
    note = diagnosis.cause(cfg, summary(best_val_loss=5.694), [5.7] * 150)
    assert note.rule == "tied_embeddings"
    assert "model.tie_embeddings=false" in note.sentence and "5.694" in note.sentence


def test_cause_falls_back_on_what_the_losses_show():
    untied = compose(["placement=post", "model.tie_embeddings=false", *NEWCOMER])
    # the same plateau without tied embeddings: no rule of ours explains it, and the sentence says so
    assert diagnosis.cause(untied, summary(best_val_loss=5.69), [5.7] * 150).rule == "plateau"
    # above the plateau and still falling steeply at the end: train longer
    still = diagnosis.cause(untied, summary(best_val_loss=5.0), falling(150, 7.0, 5.0))
    assert still.rule == "too_short" and "raise train.max_steps" in still.sentence
    # above it and flat: nothing to blame
    assert diagnosis.cause(untied, summary(best_val_loss=5.0), [5.0] * 150).rule == "unknown"


def test_cause_is_none_for_runs_that_learned_or_did_not_train():
    cfg = compose(["placement=post", *NEWCOMER])
    assert diagnosis.cause(cfg, summary(learned=True, best_val_loss=3.0)) is None
    assert diagnosis.cause(cfg, {"status": "invalid"}) is None
    assert diagnosis.cause(cfg, summary(learned=None)) is None


@pytest.mark.parametrize(
    "overrides, at, rule",
    [
        (["norm=none", "placement=pre"], 30, "diverged_no_norm"),
        (["placement=post", "warmup_steps=0"], 5, "diverged_no_warmup"),
        (["placement=pre", "warmup_steps=100"], 50, "diverged_in_warmup"),
        (["placement=pre", "warmup_steps=100"], 500, "diverged"),
    ],
)
def test_cause_of_a_divergence(overrides, at, rule):
    note = diagnosis.cause(compose(overrides), {"status": "diverged", "diverged_at": at, "steps": at})
    assert note.rule == rule and f"at step {at}" in note.sentence


def test_still_falling_measures_the_last_fifth():
    assert diagnosis.still_falling(falling(100, 10.0, 0.0)) == pytest.approx(1.8, abs=0.2)
    assert diagnosis.still_falling([3.0] * 100) == 0.0
    assert diagnosis.still_falling([3.0] * 5) is None
