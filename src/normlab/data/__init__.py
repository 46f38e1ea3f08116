"""Corpora, tokenizers and token caches.

`load_corpus(cfg.data)` returns a `TokenCorpus` (read-only token-id memmaps for the training and
validation splits plus the tokenizer); `sample_windows` draws training batches from a stream.
"""

from .batches import sample_windows
from .corpus import SOURCES, TokenCorpus, load_corpus
from .synthetic import generate_stories
from .tokenizer import EOT

__all__ = ["EOT", "SOURCES", "TokenCorpus", "generate_stories", "load_corpus", "sample_windows"]
