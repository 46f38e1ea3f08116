"""The corpus's "did it learn anything" line: the validation cross-entropy of a unigram model.

A language model that ignores its context can do no better than predicting every token with its
frequency in the training data. That model's loss on the validation tokens is

    baseline_unigram_loss = −(1/M) Σ_{j=1..M} ln p(y_j),   p(v) = (c_v + 1) / (N + V)

where c_v counts token v among the N training tokens, V is the tokenizer's vocabulary size and y_1..y_M
are the validation tokens. The +1 (Laplace's add-one smoothing) gives a token never seen in training a
finite cost, ln((N + V) / 1), instead of an infinite one; for tokens that were seen it lowers p(v) by a
factor N / (N + V) at most, i.e. it raises the baseline by at most ln(1 + V/N) — under 1e-4 nats for the
embedded corpus (N ≈ 14.6M, V = 1024).

A run whose best validation loss does not get clearly below this line has learned nothing its context
could teach it, whatever its loss curve looks like (`learned` in summary.json, see `did_learn`).

The value depends only on the token files, so it is computed once per token cache (two `bincount`s,
about a tenth of a second for the embedded corpus) and stored beside the tokens in `unigram.json`,
keyed by a hash of the entry's `meta.json`: a rebuilt entry gets a new value. Every run's `learned` rests
on it, so a stored value is used only when it is whole: its record's own SHA-256 matches, it was computed
from this many tokens and this vocabulary, and it lies where a cross-entropy with add-one smoothing can,
in [0, ln(N + V)]. Anything else — a damaged file, a hand edit — is said once and computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FILE = "unigram.json"
SMOOTHING = "add-one"

# `learned` needs the best validation loss below (1 − LEARNED_MARGIN) × the unigram baseline. A run stuck
# on the unigram plateau sits at the baseline up to the evaluation's sampling noise and its own imperfect
# fit of the unigram. Measured on the embedded corpus (vocab 1024, baseline 5.737): the unigram loss of
# `train.eval_batches` fixed windows differs from the whole split's with a standard deviation of 0.009
# nats for 10 × 16 × 64 tokens and 0.05 for 2 × 8 × 32; stuck Post-LN runs end at 5.757, 0.02 above the
# baseline. 5 % of the baseline (0.29 nats there) is beyond that noise even for the smallest evaluations,
# so no plateau run reaches it, while any run that uses its context passes it easily: bigram statistics
# alone give 2.52 nats on the same corpus, 3.2 below the baseline. A fraction rather than a fixed number
# of nats keeps the rule meaningful for corpora and vocabularies with other baselines.
LEARNED_MARGIN = 0.05


def unigram_cross_entropy(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """−mean ln p(y) over the tokens y of `val`, p = add-one-smoothed token frequencies of `train`."""
    train_counts = np.bincount(np.asarray(train), minlength=vocab_size).astype(np.float64)
    val_counts = np.bincount(np.asarray(val), minlength=vocab_size).astype(np.float64)
    if len(train_counts) > vocab_size or len(val_counts) > vocab_size:
        raise ValueError(f"token ids at or above vocab_size={vocab_size} in the token files")
    log_p = np.log(train_counts + 1.0) - np.log(train_counts.sum() + vocab_size)
    return float(-(val_counts @ log_p) / val_counts.sum())


def did_learn(best_val_loss: float | None, baseline: float | None) -> bool | None:
    """Whether the best validation loss is clearly below the unigram baseline (None when either is unknown)."""
    if best_val_loss is None or baseline is None or not np.isfinite(best_val_loss):
        return None
    return bool(best_val_loss < (1.0 - LEARNED_MARGIN) * baseline)


def _meta_digest(entry: Path) -> str | None:
    try:
        return hashlib.sha256((entry / "meta.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _write_atomic(path: Path, record: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def record_digest(record: dict[str, Any]) -> str:
    """The SHA-256 of a unigram.json record's fields (its own `record_sha256` left out), canonical JSON."""
    fields = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def stored_problem(record: Any, corpus: Any, digest: str | None) -> str | None:
    """Why a unigram.json record cannot be used for `corpus`, or None when it can; "" when it belongs to
    another build of the entry (a rebuilt cache: expected, nothing to say)."""
    if not isinstance(record, dict):
        return "it is not a record"
    if digest is None or record.get("meta_sha256") != digest or record.get("smoothing") != SMOOTHING:
        return ""
    if "record_sha256" not in record:  # written before records carried a checksum: computed again, quietly
        return ""
    if record.get("record_sha256") != record_digest(record):
        return "its checksum does not match its contents"
    n, v = len(corpus.train), int(corpus.vocab_size)
    if (record.get("train_tokens"), record.get("val_tokens"), record.get("vocab_size")) != (
        n,
        len(corpus.val),
        v,
    ):
        return "it was computed from other token counts or another vocabulary"
    value = record.get("baseline_unigram_loss")
    if not isinstance(value, int | float) or not 0.0 <= float(value) <= np.log(n + v):
        return f"its value {value!r} is not a cross-entropy of this corpus (0 to ln(N + V) = {np.log(n + v):.3f})"
    return None


def baseline_unigram_loss(corpus: Any) -> float:
    """The unigram baseline of a `TokenCorpus`, from `unigram.json` in its cache entry or computed now.

    Computing it is deterministic, so parallel jobs that race to write the file write the same value
    (each write is atomic). A read-only cache still gets the value, just not stored. A stored record that
    is not whole (`stored_problem`) is reported and computed again.
    """
    entry = Path(corpus.cache_dir)
    path = entry / FILE
    digest = _meta_digest(entry)
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(path.read_text())
        problem = stored_problem(record, corpus, digest)
        if problem is None:
            return float(record["baseline_unigram_loss"])
        if problem:
            log.warning("the unigram baseline in %s is damaged (%s); computing it again", path, problem)
    value = unigram_cross_entropy(corpus.train, corpus.val, corpus.vocab_size)
    record = {
        "baseline_unigram_loss": value,
        "smoothing": SMOOTHING,
        "vocab_size": int(corpus.vocab_size),
        "train_tokens": len(corpus.train),
        "val_tokens": len(corpus.val),
        "meta_sha256": digest,
    }
    record["record_sha256"] = record_digest(record)
    if digest is not None:
        try:
            _write_atomic(path, record)
        except OSError as e:
            log.debug("could not store the unigram baseline in %s (%s)", path, e)
    return value
