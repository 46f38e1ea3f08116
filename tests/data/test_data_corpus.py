"""`load_corpus` on the embedded corpus: tokenizer, token streams, and the shared on-disk cache."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from data_helpers import prepare_in_child

import normlab.data.cache as cache_mod
from normlab.data import EOT, TokenCorpus, load_corpus
from normlab.data.synthetic import TRAIN_STREAM, VAL_STREAM, generate_stories
from normlab.errors import UserError

N_TRAIN, N_VAL, SEED = 300, 40, 99


def small_cfg(cache_dir: Path, **over: Any) -> dict[str, Any]:
    cfg = {
        "name": "synthetic",
        "n_train_stories": N_TRAIN,
        "n_val_stories": N_VAL,
        "corpus_seed": SEED,
        "vocab_size": 512,
        "cache_dir": str(cache_dir),
    }
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> TokenCorpus:
    return load_corpus(small_cfg(tmp_path_factory.mktemp("cache")), progress=False)


def split_on_eot(stream: np.ndarray, eot: int) -> list[np.ndarray]:
    cuts = np.flatnonzero(stream == eot)
    assert len(cuts) and cuts[-1] == len(stream) - 1  # every story, the last one too, ends with eot
    return np.split(np.asarray(stream), cuts + 1)[:-1]


def test_interface(corpus: TokenCorpus) -> None:
    assert corpus.train.ndim == corpus.val.ndim == 1
    assert isinstance(corpus.train, np.memmap) and not corpus.train.flags.writeable
    assert corpus.train.dtype == np.uint16
    assert corpus.vocab_size == corpus.tokenizer.get_vocab_size() == 512
    assert corpus.eot_id == corpus.tokenizer.token_to_id(EOT)
    assert int(corpus.train.max()) < corpus.vocab_size
    assert (corpus.cache_dir / "train.bin").is_file()


def test_streams_are_the_stories_separated_by_eot(corpus: TokenCorpus) -> None:
    """Decoding each eot-delimited piece gives back exactly the generator's stories, in order."""
    for stream, name, n in ((corpus.train, TRAIN_STREAM, N_TRAIN), (corpus.val, VAL_STREAM, N_VAL)):
        pieces = split_on_eot(stream, corpus.eot_id)
        expected = generate_stories(n, SEED, stream=name)
        assert [corpus.decode(p[:-1]) for p in pieces] == expected
        assert all(corpus.eot_id not in p[:-1] for p in pieces)


def test_validation_is_not_part_of_training(corpus: TokenCorpus) -> None:
    train = {corpus.decode(p[:-1]) for p in split_on_eot(corpus.train, corpus.eot_id)}
    val = {corpus.decode(p[:-1]) for p in split_on_eot(corpus.val, corpus.eot_id)}
    assert not train & val


@pytest.mark.parametrize(
    "text",
    [
        "Lily found her red ball under the big oak tree.",
        '"Hello!" said Tom.\n\nThen they went home.',
        "Zażółć gęślą jaźń — 東京 🚀 tabs\tand  double  spaces ",
        "",
    ],
)
def test_round_trip(corpus: TokenCorpus, text: str) -> None:
    assert corpus.decode(corpus.encode(text)) == text


def test_token_ids_match_the_tokenizer(corpus: TokenCorpus) -> None:
    story = generate_stories(1, SEED, stream=TRAIN_STREAM)[0]
    ids = corpus.tokenizer.encode(story).ids
    assert list(corpus.train[: len(ids) + 1]) == [*ids, corpus.eot_id]


def test_cache_reused(tmp_path: Path, count_builds: list[Path]) -> None:
    a = load_corpus(small_cfg(tmp_path), progress=False)
    assert len(count_builds) == 1
    b = load_corpus(small_cfg(tmp_path), progress=False)
    assert len(count_builds) == 1 and b.cache_dir == a.cache_dir
    # anything that changes the tokens gets its own entry; the cache location does not count
    load_corpus(small_cfg(tmp_path, vocab_size=600), progress=False)
    load_corpus(small_cfg(tmp_path, corpus_seed=SEED + 1), progress=False)
    assert len(count_builds) == 3 and len(set(count_builds)) == 3


@pytest.mark.parametrize("victim", ["train.bin", "val.bin", "tokenizer.json", "meta.json"])
def test_truncated_or_missing_file_is_rebuilt(tmp_path: Path, count_builds: list[Path], victim: str) -> None:
    first = load_corpus(small_cfg(tmp_path), progress=False)
    good = {p.name: p.read_bytes() for p in first.cache_dir.iterdir() if p.name != "meta.json"}
    path = first.cache_dir / victim
    if victim == "meta.json":
        path.unlink()
    else:
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
    again = load_corpus(small_cfg(tmp_path), progress=False)
    assert len(count_builds) == 2
    assert {p.name: p.read_bytes() for p in again.cache_dir.iterdir() if p.name != "meta.json"} == good
    assert sorted(p.name for p in again.cache_dir.iterdir()) == [
        "meta.json",
        "tokenizer.json",
        "train.bin",
        "val.bin",
    ]  # no temporary files left behind


def test_two_processes_build_once_and_agree(tmp_path: Path) -> None:
    cfg = small_cfg(tmp_path)
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = [pool.apply_async(prepare_in_child, (cfg, 1.0)) for _ in range(2)]
        out = [r.get(timeout=120) for r in results]
    assert sorted(n for n, _, _ in out) == [0, 1]  # exactly one of them built the cache
    assert out[0][1:] == out[1][1:]  # and both read identical bytes from the same entry


def test_unknown_name_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_corpus(small_cfg(tmp_path, name="wikipedia"), progress=False)
    msg = str(err.value)
    assert "'wikipedia'" in msg
    for choice in ("data=synthetic", "data=tinystories", "data=text"):
        assert choice in msg
    assert msg.count(". ") == 0 and msg.endswith(".")  # one sentence


def test_unwritable_cache_dir_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(UserError, match=r"data\.cache_dir=.*NORMLAB_CACHE_DIR"):
        load_corpus(small_cfg(blocker / "cache"), progress=False)


def test_bad_sizes_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="n_train_stories"):
        load_corpus(small_cfg(tmp_path, n_train_stories=0), progress=False)
    with pytest.raises(UserError, match="vocab_size"):
        load_corpus(small_cfg(tmp_path, vocab_size=100), progress=False)


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NORMLAB_CACHE_DIR", str(tmp_path / "env"))
    assert cache_mod.cache_root(None) == tmp_path / "env"
    assert cache_mod.cache_root(str(tmp_path / "cfg")) == tmp_path / "cfg"
    monkeypatch.delenv("NORMLAB_CACHE_DIR")
    assert "normlab" in str(cache_mod.cache_root(None))


def test_dtype_follows_vocabulary() -> None:
    assert cache_mod.dtype_for(4096) == np.uint16
    assert cache_mod.dtype_for(65536) == np.uint16
    assert cache_mod.dtype_for(65537) == np.uint32
