"""The unigram baseline against hand computations, its cache file, and the `learned` rule."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import normlab.data.unigram as unigram
from normlab.data import load_corpus
from normlab.data.unigram import LEARNED_MARGIN, baseline_unigram_loss, did_learn, unigram_cross_entropy


def test_cross_entropy_by_hand():
    # train 0 0 1 2 (N = 4), vocabulary V = 4: add-one counts 3, 2, 2, 1 over N + V = 8
    # val 0 1 3: −(ln 3/8 + ln 2/8 + ln 1/8) / 3, token 3 never seen in training
    train = np.array([0, 0, 1, 2], dtype=np.uint16)
    val = np.array([0, 1, 3], dtype=np.uint16)
    expected = -(math.log(3 / 8) + math.log(2 / 8) + math.log(1 / 8)) / 3
    assert unigram_cross_entropy(train, val, 4) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.48219, abs=1e-5)


def test_uniform_corpus_gives_log_vocab():
    # every token equally frequent in training: p = 1/V whatever the validation tokens are
    vocab = 16
    train = np.tile(np.arange(vocab, dtype=np.uint16), 50)
    val = np.array([3, 3, 3, 7, 15], dtype=np.uint16)
    assert unigram_cross_entropy(train, val, vocab) == pytest.approx(math.log(vocab), rel=1e-12)


def test_ids_beyond_the_vocabulary_are_an_error():
    with pytest.raises(ValueError, match="vocab_size=4"):
        unigram_cross_entropy(np.array([0, 5]), np.array([0]), 4)


def test_learned_needs_five_percent_below_the_baseline():
    baseline = 5.74
    limit = (1 - LEARNED_MARGIN) * baseline  # 5.453
    assert LEARNED_MARGIN == 0.05
    assert did_learn(2.33, baseline) is True
    assert did_learn(limit - 1e-9, baseline) is True
    assert did_learn(limit + 1e-9, baseline) is False
    assert did_learn(5.757, baseline) is False  # a run on the unigram plateau
    assert did_learn(None, baseline) is None and did_learn(2.0, None) is None
    assert did_learn(float("nan"), baseline) is None


@dataclass
class FakeCorpus:
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    cache_dir: Path


def test_baseline_is_stored_beside_the_tokens_and_reused(tmp_path, monkeypatch):
    (tmp_path / "meta.json").write_text('{"built_at": "one"}')
    corpus = FakeCorpus(np.array([0, 0, 1, 2]), np.array([0, 1, 3]), 4, tmp_path)
    value = baseline_unigram_loss(corpus)
    assert value == pytest.approx(1.48219, abs=1e-5)
    record = json.loads((tmp_path / "unigram.json").read_text())
    assert record["baseline_unigram_loss"] == value and record["smoothing"] == "add-one"

    def boom(*args):
        raise AssertionError("recomputed although stored")

    monkeypatch.setattr(unigram, "unigram_cross_entropy", boom)
    assert baseline_unigram_loss(corpus) == value
    # a rebuilt entry (new meta.json) is recomputed
    (tmp_path / "meta.json").write_text('{"built_at": "two"}')
    with pytest.raises(AssertionError, match="recomputed"):
        baseline_unigram_loss(corpus)


def test_an_unwritable_cache_still_gets_the_value(tmp_path, monkeypatch):
    (tmp_path / "meta.json").write_text("{}")

    def refuse(path, record):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(unigram, "_write_atomic", refuse)
    corpus = FakeCorpus(np.array([0, 1]), np.array([1]), 2, tmp_path)
    assert baseline_unigram_loss(corpus) == pytest.approx(-math.log(2 / 4))
    assert not (tmp_path / "unigram.json").exists()


def test_baseline_of_a_real_cache(tmp_path):
    cfg = {
        "name": "synthetic",
        "n_train_stories": 200,
        "n_val_stories": 30,
        "corpus_seed": 7,
        "vocab_size": 300,
        "cache_dir": str(tmp_path),
    }
    corpus = load_corpus(cfg, progress=False)
    value = baseline_unigram_loss(corpus)
    assert (corpus.cache_dir / "unigram.json").exists()
    # independent recomputation with plain Python counting
    counts: dict[int, int] = {}
    for tok in corpus.train.tolist():
        counts[tok] = counts.get(tok, 0) + 1
    n, vocab = len(corpus.train), corpus.vocab_size
    expected = -sum(math.log((counts.get(t, 0) + 1) / (n + vocab)) for t in corpus.val.tolist()) / len(
        corpus.val
    )
    assert value == pytest.approx(expected, rel=1e-9)
    # frequencies beat uniform guessing over the vocabulary on real text, and a cross-entropy is positive
    assert 0 < value < math.log(vocab)


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda r: r.update(baseline_unigram_loss=100.0), "checksum does not match"),  # a hand edit
        (
            lambda r: r.update(
                baseline_unigram_loss=100.0,
                record_sha256=unigram.record_digest({**r, "baseline_unigram_loss": 100.0}),
            ),
            "not a cross-entropy",
        ),
        (
            lambda r: r.update(train_tokens=3, record_sha256=unigram.record_digest({**r, "train_tokens": 3})),
            "other token counts",
        ),
    ],
)
def test_a_damaged_stored_baseline_is_computed_again(tmp_path, caplog, damage, said):
    """unigram.json decides every run's `learned`: a record that is not whole is never used."""
    (tmp_path / "meta.json").write_text('{"built_at": "one"}')
    corpus = FakeCorpus(np.array([0, 0, 1, 2]), np.array([0, 1, 3]), 4, tmp_path)
    value = baseline_unigram_loss(corpus)
    path = tmp_path / "unigram.json"
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    with caplog.at_level("WARNING"):
        assert baseline_unigram_loss(corpus) == pytest.approx(value)
    assert said in caplog.text and "computing it again" in caplog.text
    assert json.loads(path.read_text())["baseline_unigram_loss"] == pytest.approx(value)  # stored whole again


def test_a_record_written_before_checksums_is_computed_again_quietly(tmp_path, caplog):
    (tmp_path / "meta.json").write_text('{"built_at": "one"}')
    corpus = FakeCorpus(np.array([0, 0, 1, 2]), np.array([0, 1, 3]), 4, tmp_path)
    value = baseline_unigram_loss(corpus)
    path = tmp_path / "unigram.json"
    record = json.loads(path.read_text())
    del record["record_sha256"]
    path.write_text(json.dumps({**record, "baseline_unigram_loss": 100.0}))
    with caplog.at_level("WARNING"):
        assert baseline_unigram_loss(corpus) == pytest.approx(value)
    assert "damaged" not in caplog.text and "record_sha256" in json.loads(path.read_text())
