"""`load_corpus`: from the `data` config group to token streams the training loop samples from."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
from tqdm.auto import tqdm

from normlab.errors import UserError

from . import cache
from .sources import Source, SyntheticSource, data_config, optional_int
from .tokenizer import EOT, decode_text, load_tokenizer_file, train_bpe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenCorpus:
    """A tokenized corpus: read-only memmaps of token ids, one end-of-text id after every story."""

    train: np.ndarray  # 1-D read-only memmap of token ids
    val: np.ndarray  # 1-D read-only memmap, from the validation split
    tokenizer: tokenizers.Tokenizer
    eot_id: int
    vocab_size: int  # tokenizer.get_vocab_size()
    cache_dir: Path  # the keyed directory holding this corpus's files

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return decode_text(self.tokenizer, ids)


def _synthetic(cfg: dict[str, Any], progress: bool) -> Source:
    return SyntheticSource(cfg, progress)


def _tinystories(cfg: dict[str, Any], progress: bool) -> Source:
    from .tinystories import tinystories_source

    return tinystories_source(cfg, progress)


def _text(cfg: dict[str, Any], progress: bool) -> Source:
    from .local import text_source

    return text_source(cfg)  # local files: nothing to download, no progress to show


SOURCES: dict[str, Callable[[dict[str, Any], bool], Source]] = {
    "synthetic": _synthetic,
    "tinystories": _tinystories,
    "text": _text,
}


def _plain(data_cfg: Mapping[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(data_cfg):
        return dict(OmegaConf.to_container(data_cfg, resolve=True))  # type: ignore[arg-type]
    return dict(data_cfg)


def make_source(cfg: dict[str, Any], progress: bool = True) -> Source:
    name = cfg.get("name")
    if name not in SOURCES:
        choices = ", ".join(f"data={n}" for n in SOURCES)
        raise UserError(f"Unknown data source {name!r}; choose one of {choices}.")
    return SOURCES[name](cfg, progress)


def tokenizer_spec(cfg: dict[str, Any]) -> dict[str, Any]:
    """What determines the tokenizer: a given file's bytes, or the BPE training settings."""
    path = cfg.get("tokenizer_path")
    if path:
        p = cache.absolute(path)
        load_tokenizer_file(p)  # a clear error now for a missing or unreadable file
        return {"file_sha256": cache.sha256_file(p)}
    typed = data_config(cfg, cfg.get("name") or "synthetic")  # the tokenizer keys are alike in every option
    return {
        "bpe_vocab_size": int(typed.vocab_size),
        "train_stories": optional_int(typed.tokenizer_train_stories),
    }


class CorpusTooShort(UserError):
    """A split has fewer tokens than one training window needs; raised before a new cache entry is kept."""

    def __init__(self, split: str, n_tokens: int, min_tokens: int) -> None:
        super().__init__(
            f"the {split} split has {n_tokens} tokens, fewer than the {min_tokens} one window needs"
        )
        self.split, self.n_tokens, self.min_tokens = split, n_tokens, min_tokens


def check_length(meta: Mapping[str, Any], min_tokens: int | None) -> None:
    """CorpusTooShort unless both splits hold `min_tokens` tokens (one window and its next-token target)."""
    if not min_tokens:
        return
    for split, key in (("training", "train_tokens"), ("validation", "val_tokens")):
        if meta[key] < min_tokens:
            raise CorpusTooShort(split, int(meta[key]), min_tokens)


def load_corpus(
    data_cfg: Mapping[str, Any], *, progress: bool = True, min_tokens: int | None = None
) -> TokenCorpus:
    """Tokenize the corpus that `data_cfg` (the resolved `data` config group) names, or reuse its cache.

    The first call builds the tokenizer and the token ids under the cache directory; later calls with
    the same settings only open the files. Safe to call from many processes at once. `min_tokens`: each
    split must hold at least that many tokens (CorpusTooShort otherwise; a new entry is then not kept).
    """
    cfg = _plain(data_cfg)
    source = make_source(cfg, progress)
    tok_spec = tokenizer_spec(cfg)
    spec = {"name": source.name, "source": source.spec, "tokenizer": tok_spec}
    root = cache.cache_root(cfg.get("cache_dir"))

    def make_tokenizer() -> tokenizers.Tokenizer:
        if "file_sha256" in tok_spec:
            return load_tokenizer_file(cache.absolute(cfg["tokenizer_path"]))
        texts = source.train_texts()
        limit = tok_spec["train_stories"]
        total = source.n_train if limit is None else min(limit, source.n_train or limit)
        if limit is not None:
            texts = itertools.islice(texts, limit)
        if cache.progress_enabled(progress):
            texts = tqdm(texts, total=total, desc="training tokenizer", unit=" stories", leave=False)
        return train_bpe(texts, tok_spec["bpe_vocab_size"], length=total)

    def build(folder: Path) -> dict[str, Any]:
        meta = cache.build_entry(
            folder,
            spec,
            make_tokenizer,
            source.train_texts,
            source.val_texts,
            n_train=source.n_train,
            n_val=source.n_val,
            info=source.info,
            progress=progress,
        )
        check_length(meta, min_tokens)  # inside the build: a corpus too short leaves no cache entry
        return meta

    entry, meta = cache.get_or_build(root, source.name, spec, build, check=source.check_readable)
    check_length(meta, min_tokens)  # an entry built earlier for shorter windows
    if meta.get("built_by_pid") == os.getpid() and meta.get("build_seconds") is not None:
        log.info(
            "data cache %s: %d train tokens (%d stories), %d validation tokens, vocab %d, built in %.1fs",
            entry,
            meta["train_tokens"],
            meta["train_stories"],
            meta["val_tokens"],
            meta["vocab_size"],
            meta["build_seconds"],
        )
    return open_entry(entry, meta)


def open_entry(entry: Path, meta: dict[str, Any]) -> TokenCorpus:
    """Open a valid cache entry: memmaps and the tokenizer, nothing else."""
    tok = tokenizers.Tokenizer.from_file(str(entry / "tokenizer.json"))
    dtype = np.dtype(meta["dtype"])
    train = np.memmap(entry / "train.bin", dtype=dtype, mode="r")
    val = np.memmap(entry / "val.bin", dtype=dtype, mode="r")
    eot_id = tok.token_to_id(EOT)
    if eot_id != meta["eot_id"]:  # would mean the files disagree: never silently train on that
        raise RuntimeError(f"corrupt data cache {entry}: end-of-text id mismatch; delete that directory")
    return TokenCorpus(train, val, tok, eot_id, tok.get_vocab_size(), entry)
