"""The layer-ablation probe against models with a block really removed, and through a whole run."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from trainers import RowCollector

from normlab.metrics import names
from normlab.metrics.ablation import losses_with_each_block_skipped
from normlab.train.run import Run


def cross_entropy(model, x, y) -> float:
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()


@pytest.mark.parametrize(("norm", "placement"), [("ln", "pre"), ("rms", "mixln"), ("ln", "resi_dual")])
def test_each_skipped_block_matches_a_copy_of_the_model_without_it(make_gpt, norm, placement):
    model = make_gpt(norm, placement, n_layers=4).eval()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 97, (3, 16), generator=g), torch.randint(0, 97, (3, 16), generator=g)

    def loss(h):
        return F.cross_entropy(model.head(h).flatten(0, 1), y.flatten())

    full, skipped = losses_with_each_block_skipped(model, x, loss)
    assert full.item() == pytest.approx(cross_entropy(model, x, y), rel=1e-6)
    for i in range(4):
        without = copy.deepcopy(model)
        without.blocks[i] = nn.Identity()  # passes the stream (or ResiDual's pair of streams) through
        assert skipped[i].item() == pytest.approx(cross_entropy(without, x, y), rel=1e-6), i
    assert len(set(skipped.tolist())) == 4  # every block matters a little at init


def test_the_probe_adds_its_losses_and_leaves_val_loss_unchanged(make_gpt, make_trainer):
    results = {}
    for on in (False, True):
        trainer = make_trainer(
            make_gpt("ln", "pre", n_layers=3),
            train={"eval_every": 2, "max_steps": 4},
            metrics={"layer_ablation": on},
        )
        collector = RowCollector()
        trainer.fit([collector])
        results[on] = collector
    off, on = results[False], results[True]
    evals_off = [r for r in off.rows if names.VAL_LOSS in r]
    evals_on = [r for r in on.rows if names.VAL_LOSS in r]
    assert [r[names.VAL_LOSS] for r in evals_on] == [r[names.VAL_LOSS] for r in evals_off]
    keys = [names.layer_ablation(i) for i in range(3)]
    for row in [*evals_on, *on.evals]:
        assert all(row[k] > 0 for k in keys)
    assert on.evals[0][names.VAL_LOSS] == off.evals[0][names.VAL_LOSS]
    assert not any(k in r for r in [*off.rows, *off.evals] for k in keys)
    assert not any(keys[0] in r for r in on.rows if names.VAL_LOSS not in r)  # evaluation rows only


def test_a_run_logs_the_probe_when_asked(make_cfg, tmp_path):
    Run(make_cfg("metrics.layer_ablation=true", "placement=lnscale"), tmp_path).execute()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in rows if names.VAL_LOSS in r][-1]
    assert {names.layer_ablation(0), names.layer_ablation(1)} <= final.keys()
