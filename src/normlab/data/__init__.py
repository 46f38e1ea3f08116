"""Corpora, tokenizers and token caches.

`load_corpus(cfg.data)` returns a `TokenCorpus` (read-only token-id memmaps for the training and
validation splits plus the tokenizer); `sample_windows` draws training batches from a stream.
"""

from typing import Any

from .corpus import SOURCES, TokenCorpus, load_corpus
from .synthetic import generate_stories
from .tokenizer import EOT

__all__ = ["EOT", "SOURCES", "TokenCorpus", "generate_stories", "load_corpus", "sample_windows"]


def __getattr__(name: str) -> Any:
    # `sample_windows` needs torch: imported on first use, so data preparation starts without it
    if name == "sample_windows":
        from .batches import sample_windows

        return sample_windows
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
