"""Trainer.fit's callback protocol: what each callback hears, in which order, and when on_end comes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from trainers import config_trainer

from normlab.metrics import names
from normlab.model import GPT

TRAIN = {"batch_size": 2, "seq_len": 8, "eval_batches": 1, "eval_every": 0, "flush_every": 4}


class Recorder:
    """Implements the protocol without subclassing it (as the sinks do) and logs every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def on_step(self, row):
        self.calls.append(("step", row[names.STEP]))

    def on_eval(self, row):
        self.calls.append(("eval", (row[names.STEP], names.VAL_LOSS in row)))

    def on_checkpoint(self, step):
        self.calls.append(("checkpoint", step))

    def on_end(self, result):
        self.calls.append(("end", result.status))


def trainer(**train):
    torch.manual_seed(0)
    model = GPT(50, 8, 16, 2, 1, {"name": "ln"}, "pre")
    tokens = np.random.default_rng(0).integers(0, 50, 2000).astype(np.uint16)
    return config_trainer(model, tokens, train={**TRAIN, **train}, metrics={"enabled": False})


def test_rows_checkpoints_evaluation_and_end_arrive_in_order():
    rec = Recorder()
    result = trainer(max_steps=6, ckpt_every=2).fit([rec])
    assert result.status == "completed"
    # a checkpoint comes after every row before it was passed on; none at the last step (the run's own
    # last.pt covers it); the final evaluation row, then on_end once
    assert rec.calls == [
        ("step", 0),
        ("step", 1),
        ("checkpoint", 2),
        ("step", 2),
        ("step", 3),
        ("checkpoint", 4),
        ("step", 4),
        ("step", 5),
        ("eval", (6, True)),
        ("end", "completed"),
    ]


def test_every_callback_hears_each_row_in_list_order():
    first, second = Recorder(), Recorder()
    order: list[str] = []
    first.on_step = lambda row: order.append("first")
    second.on_step = lambda row: order.append("second")
    trainer(max_steps=2, ckpt_every=0).fit([first, second])
    assert order == ["first", "second", "first", "second"]


def test_a_paused_fit_does_not_end_and_the_next_call_does():
    rec, t = Recorder(), trainer(max_steps=4, ckpt_every=0)
    t.fit([rec], stop_at=2)
    assert [c for c in rec.calls if c[0] == "end"] == []
    t.fit([rec])
    assert [c for c in rec.calls if c[0] != "checkpoint"] == [
        *(("step", s) for s in range(4)),
        ("eval", (4, True)),
        ("end", "completed"),
    ]


def test_on_end_comes_even_when_the_loop_raises():
    rec, t = Recorder(), trainer(max_steps=4, ckpt_every=0, flush_every=1)

    def fail_at_step_2(row):
        rec.calls.append(("step", row[names.STEP]))
        if row[names.STEP] == 2:
            raise RuntimeError("a sink failed")

    rec.on_step = fail_at_step_2
    with pytest.raises(RuntimeError, match="a sink failed"):
        t.fit([rec])
    assert rec.calls == [("step", 0), ("step", 1), ("step", 2), ("end", "completed")]
