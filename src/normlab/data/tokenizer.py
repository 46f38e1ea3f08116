"""Byte-level BPE tokenizers: trained with the `tokenizers` library, or loaded from a file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from normlab.errors import UserError

EOT = "<|endoftext|>"


def new_bpe() -> Tokenizer:
    """An untrained byte-level BPE: lossless on any text (decode(encode(s)) == s)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(
    texts: Iterable[str], vocab_size: int, *, length: int | None = None, progress: bool = False
) -> Tokenizer:
    """Train a byte-level BPE of at most `vocab_size` tokens with the end-of-text token as id 0.

    A small corpus can saturate below `vocab_size` (no pair left to merge): the result is then smaller.
    """
    if vocab_size < 257 + 1:
        raise UserError(
            f"data.vocab_size={vocab_size} is too small for a byte-level BPE (256 bytes + end-of-text); "
            "set data.vocab_size to 258 or more (512 and up is sensible)."
        )
    tok = new_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    return tok


def load_tokenizer_file(path: str | Path) -> Tokenizer:
    """Load a `tokenizers` JSON file, adding the end-of-text token as a special token if it lacks it."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(
            f"data.tokenizer_path={path} is not a file; point it at a tokenizer.json saved by the "
            "`tokenizers` library, or set data.tokenizer_path=null to train one."
        )
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as exc:  # the library raises a plain Exception on bad JSON
        raise UserError(
            f"data.tokenizer_path={path} could not be read as a `tokenizers` file ({exc}); "
            "point it at a tokenizer.json saved by the `tokenizers` library."
        ) from exc
    if tok.token_to_id(EOT) is None:
        tok.add_special_tokens([EOT])
    return tok


def encode_many(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of many texts at once, on all cores (the Rust side parallelises a batch)."""
    fast = getattr(tok, "encode_batch_fast", None)  # tokenizers >= 0.20: skips offsets
    encs = (
        fast(texts, add_special_tokens=False) if fast else tok.encode_batch(texts, add_special_tokens=False)
    )
    return [e.ids for e in encs]
