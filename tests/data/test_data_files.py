"""Real-data sources through the real code path: TinyStories layouts, data=text, Hub offline, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from data_helpers import LAYOUTS, write_layout

import normlab.data.hub as hub_mod
from normlab.data import TokenCorpus, load_corpus
from normlab.data.tokenizer import train_bpe
from normlab.errors import InvalidConfig, UserError

ROOT = Path(__file__).resolve().parents[2]
PREPARE = ROOT / "scripts" / "prepare_data.py"


def ts_cfg(path: Path | None, cache_dir: Path, **over: Any) -> dict[str, Any]:
    cfg = {
        "name": "tinystories",
        "path": None if path is None else str(path),
        "hub_id": "roneneldan/TinyStories",
        "revision": "main",
        "version": None,  # TinyStoriesData's default: recognised from the file names
        "max_train_stories": None,
        "max_val_stories": None,
        "text_field": "text",
        "vocab_size": 512,
        "tokenizer_train_stories": None,
        "tokenizer_path": None,
        "cache_dir": str(cache_dir),
    }
    cfg.update(over)
    return cfg


def documents(corpus: TokenCorpus, split: str) -> list[str]:
    stream = np.asarray(corpus.train if split == "train" else corpus.val)
    cuts = np.flatnonzero(stream == corpus.eot_id)
    assert len(cuts) and cuts[-1] == len(stream) - 1
    return [corpus.decode(p[:-1]) for p in np.split(stream, cuts + 1)[:-1]]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_keeps_story_boundaries_and_splits(layout: str, layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir(layout)
    corpus = load_corpus(ts_cfg(root, tmp_path / "cache"), progress=False)  # data.version left out
    assert documents(corpus, "train") == data["train"]  # every story whole, in order, nothing else
    assert documents(corpus, "val") == data["val"]  # validation = the validation files
    assert any("\n\n" in s for s in data["train"])  # boundaries are not paragraph breaks


def test_subset_takes_the_first_stories(layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir("parquet", n_train=100, n_val=30)
    cfg = ts_cfg(root, tmp_path / "cache", max_train_stories=70, max_val_stories=7)
    corpus = load_corpus(cfg, progress=False)
    assert documents(corpus, "train") == data["train"][:70]  # crosses the first parquet shard
    assert documents(corpus, "val") == data["val"][:7]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_official_files_are_recognised_by_their_names(version: str, tmp_path: Path, caplog) -> None:
    """A folder in one official layout needs no data.version; the log says which files it found."""
    root = tmp_path / version
    data = write_layout(root, f"{version}txt", 40, 10, seed=3)
    with caplog.at_level("INFO", logger="normlab.data.tinystories"):
        corpus = load_corpus(ts_cfg(root, tmp_path / "cache"), progress=False)
    assert documents(corpus, "val") == data["val"] and documents(corpus, "train") == data["train"]
    names = {"v1": "TinyStories-train.txt", "v2": "TinyStoriesV2-GPT4-train.txt"}
    (said,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("data=tinystories: using")]
    assert f"official TinyStories {version.upper()} text files ({names[version]}" in said
    assert said.endswith("(recognised by their names)")


def test_version_picks_the_files(tmp_path: Path, caplog) -> None:
    root = tmp_path / "both"
    v2 = write_layout(root, "v2txt", 40, 10, seed=1)
    v1 = write_layout(root, "v1txt", 40, 10, seed=2)
    cache = tmp_path / "cache"
    with caplog.at_level("INFO", logger="normlab.data.tinystories"):
        assert documents(load_corpus(ts_cfg(root, cache), progress=False), "val") == v2["val"]  # V2 first
    assert any(
        "the V1 files are there too: data.version=v1 to use them" in r.getMessage() for r in caplog.records
    )
    assert documents(load_corpus(ts_cfg(root, cache, version="v2"), progress=False), "val") == v2["val"]
    assert documents(load_corpus(ts_cfg(root, cache, version="v1"), progress=False), "val") == v1["val"]
    # the value is refused by TinyStoriesData's rule, with the sentence a command line gets
    with pytest.raises(
        InvalidConfig, match=r"^data.version=v3 is not allowed; data.version takes one of v1, v2"
    ):
        load_corpus(ts_cfg(root, cache, version="v3"), progress=False)


def test_cache_reused_and_invalidated_by_new_data(
    layout_dir, tmp_path: Path, count_builds: list[Path]
) -> None:
    root, _ = layout_dir("v2txt")
    cfg = ts_cfg(root, tmp_path / "cache")
    first = load_corpus(cfg, progress=False)
    second = load_corpus(cfg, progress=False)
    assert len(count_builds) == 1 and second.cache_dir == first.cache_dir
    with open(root / "TinyStoriesV2-GPT4-train.txt", "a", encoding="utf-8") as f:
        f.write("One more story about a cat.\n<|endoftext|>\n")
    third = load_corpus(cfg, progress=False)
    assert len(count_builds) == 2 and third.cache_dir != first.cache_dir
    assert documents(third, "train")[-1] == "One more story about a cat."


def test_truncated_cache_is_rebuilt(layout_dir, tmp_path: Path, count_builds: list[Path]) -> None:
    root, data = layout_dir("jsonl")
    cfg = ts_cfg(root, tmp_path / "cache")
    corpus = load_corpus(cfg, progress=False)
    good = (corpus.cache_dir / "val.bin").read_bytes()
    (corpus.cache_dir / "val.bin").write_bytes(good[:-3])
    again = load_corpus(cfg, progress=False)
    assert len(count_builds) == 2
    assert (again.cache_dir / "val.bin").read_bytes() == good
    assert documents(again, "val") == data["val"]


def test_wrong_path_says_what_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_corpus(ts_cfg(tmp_path / "nope", tmp_path / "cache"), progress=False)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.md").write_text("hello")
    with pytest.raises(UserError) as err:
        load_corpus(ts_cfg(junk, tmp_path / "cache"), progress=False)
    msg = str(err.value)
    assert "TinyStoriesV2-GPT4-train.txt" in msg and "TinyStoriesV2-GPT4-valid.txt" in msg
    assert "TinyStories-train.txt" in msg and "TinyStories-valid.txt" in msg
    assert "parquet" in msg and "notes.md" in msg and msg.endswith(".")


def test_other_version_present_is_pointed_out(layout_dir, tmp_path: Path) -> None:
    root, _ = layout_dir("v1txt")
    with pytest.raises(UserError, match="set data.version=v1, or leave it out"):
        load_corpus(ts_cfg(root, tmp_path / "cache", version="v2"), progress=False)


def test_missing_validation_split_is_an_error(layout_dir, tmp_path: Path) -> None:
    root, _ = layout_dir("jsonl")
    (root / "validation.jsonl").unlink()
    with pytest.raises(UserError, match="no validation files"):
        load_corpus(ts_cfg(root, tmp_path / "cache"), progress=False)


def test_jsonl_field_errors_name_the_field(tmp_path: Path) -> None:
    root = tmp_path / "j"
    root.mkdir()
    for name in ("train.jsonl", "val.jsonl"):
        (root / name).write_text('{"story": "A cat sat."}\n')
    with pytest.raises(UserError, match="data.text_field"):
        load_corpus(ts_cfg(root, tmp_path / "cache"), progress=False)
    corpus = load_corpus(ts_cfg(root, tmp_path / "cache", text_field="story"), progress=False)
    assert documents(corpus, "val") == ["A cat sat."]


# --- data=text ------------------------------------------------------------------------------------


def text_cfg(path: Path, cache_dir: Path, **over: Any) -> dict[str, Any]:
    cfg = {
        "name": "text",
        "path": str(path),
        "val_path": None,
        "val_fraction": 0.1,
        "separator": None,
        "text_field": "text",
        "max_train_stories": None,
        "max_val_stories": None,
        "vocab_size": 400,
        "tokenizer_train_stories": None,
        "tokenizer_path": None,
        "cache_dir": str(cache_dir),
    }
    cfg.update(over)
    return cfg


def test_text_single_file_holds_out_whole_documents(tmp_path: Path) -> None:
    paragraphs = [f"Paragraph {i} is about a dog named Rex and a ball number {i}." for i in range(50)]
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs) + "\n")
    corpus = load_corpus(text_cfg(tmp_path / "book.txt", tmp_path / "cache"), progress=False)
    train, val = documents(corpus, "train"), documents(corpus, "val")
    assert val == paragraphs[::10]  # every 10th document, whole
    assert train == [p for i, p in enumerate(paragraphs) if i % 10]
    assert not set(train) & set(val)


def test_text_folder_with_splits_and_val_path(layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir("jsonl")
    corpus = load_corpus(text_cfg(root, tmp_path / "cache"), progress=False)
    assert documents(corpus, "val") == data["val"]
    # a separate validation file
    corpus = load_corpus(
        text_cfg(root / "train.jsonl", tmp_path / "cache", val_path=str(root / "validation.jsonl")),
        progress=False,
    )
    assert documents(corpus, "train") == data["train"] and documents(corpus, "val") == data["val"]


def test_text_parquet_and_official_txt(layout_dir, tmp_path: Path) -> None:
    for layout in ("parquet", "v2txt"):
        root, data = layout_dir(layout)
        corpus = load_corpus(text_cfg(root, tmp_path / "cache"), progress=False)
        assert documents(corpus, "train") == data["train"]
        assert documents(corpus, "val") == data["val"]


def test_text_needs_a_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"set data\.path="):
        load_corpus({**text_cfg(tmp_path, tmp_path / "cache"), "path": None}, progress=False)


# --- tokenizer files --------------------------------------------------------------------------------


def test_tokenizer_path_is_used_and_keys_the_cache(layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir("jsonl")
    tok = train_bpe(data["train"], 300)
    tok.save(str(tmp_path / "tok.json"))
    corpus = load_corpus(
        ts_cfg(root, tmp_path / "cache", tokenizer_path=str(tmp_path / "tok.json")), progress=False
    )
    assert corpus.vocab_size == 300 and corpus.tokenizer.to_str() == tok.to_str()
    assert documents(corpus, "val") == data["val"]
    with pytest.raises(UserError, match="data.tokenizer_path"):
        load_corpus(
            ts_cfg(root, tmp_path / "cache", tokenizer_path=str(tmp_path / "missing.json")), progress=False
        )


def test_big_vocabulary_is_stored_as_uint32(layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir("jsonl", n_train=20, n_val=5)
    tok = train_bpe(data["train"], 300)
    tok.add_tokens([f"zzq{i}" for i in range(65_300)])  # push ids past 65535
    tok.save(str(tmp_path / "big.json"))
    (root / "validation.jsonl").write_text(json.dumps({"text": "zzq65299 then a cat"}) + "\n")
    corpus = load_corpus(
        ts_cfg(root, tmp_path / "cache", tokenizer_path=str(tmp_path / "big.json")), progress=False
    )
    assert corpus.train.dtype == np.uint32 and corpus.val.dtype == np.uint32
    assert int(corpus.val.max()) > 65535
    assert documents(corpus, "val") == ["zzq65299 then a cat"]


# --- the Hub, offline -------------------------------------------------------------------------------


def test_offline_without_a_local_copy_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog
) -> None:
    import datasets.config
    import huggingface_hub.constants

    # an empty Hugging Face cache, and no network whatever the machine has
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setattr(hub_mod, "hub_reachable", lambda timeout=3.0: False)
    for version in ("v1", "v2", None):
        caplog.clear()
        with caplog.at_level("INFO"), pytest.raises(UserError) as err:
            load_corpus(ts_cfg(None, tmp_path / "cache", version=version), progress=False)
        msg = str(err.value)
        assert "data.path=" in msg and "data=synthetic" in msg
        assert msg.endswith(".") and msg.count(". ") == 0 and "\n" not in msg
        # nothing claimed to be building what cannot be had, and nothing left behind
        assert not any("building" in r.getMessage() for r in caplog.records), caplog.text
        assert not (tmp_path / "cache").exists()


def test_hub_probe_respects_offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_mod.hub_reachable() is False


# --- scripts/prepare_data.py ------------------------------------------------------------------------


def run_prepare(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PREPARE), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_prepare_offline_exits_with_the_sentence(tmp_path: Path) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = run_prepare("data=tinystories", f"data.cache_dir={tmp_path / 'cache'}", env=env)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "data.path=" in lines[0] and "data=synthetic" in lines[0], out.stderr


def test_two_prepares_at_once_share_one_cache(layout_dir, tmp_path: Path) -> None:
    root, data = layout_dir("v2txt", n_train=400, n_val=40)
    args = [
        "data=tinystories",
        f"data.path={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.vocab_size=512",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, str(PREPARE), "--quiet", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    entries = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(entries) == 1
    meta = json.loads((entries[0] / "meta.json").read_text())
    assert meta["train_stories"] == 400 and meta["val_stories"] == 40
    printed = {out.decode().split("cache:")[1].split()[0] for out, _ in outs}
    assert printed == {str(entries[0])}
    corpus = load_corpus(ts_cfg(root, tmp_path / "cache"), progress=False)
    assert documents(corpus, "val") == data["val"]
    digest = hashlib.sha256((entries[0] / "train.bin").read_bytes()).hexdigest()
    assert digest == hashlib.sha256(np.asarray(corpus.train).tobytes()).hexdigest()


# --- the Hub, with the network replaced by local files ---------------------------------------------


def test_hub_v1_goes_through_datasets(monkeypatch: pytest.MonkeyPatch, layout_dir, tmp_path: Path) -> None:
    """V1 is `datasets.load_dataset(hub_id, revision=..., split=...)`; a local snapshot stands in for the Hub."""
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(hub_mod, "hub_reachable", lambda timeout=3.0: True)
    root, data = layout_dir("parquet")
    cfg = ts_cfg(None, tmp_path / "cache", hub_id=str(root), version="v1", max_train_stories=50)
    corpus = load_corpus(cfg, progress=False)
    assert documents(corpus, "train") == data["train"][:50]
    assert documents(corpus, "val") == data["val"]
    assert any((tmp_path / "hf-datasets").iterdir())  # went through the datasets cache


def test_hub_v2_fetches_the_official_text_files(
    monkeypatch: pytest.MonkeyPatch, layout_dir, tmp_path: Path
) -> None:
    import huggingface_hub

    root, data = layout_dir("v2txt")
    calls = []

    def fake_download(repo_id: str, filename: str, *, repo_type: str, revision: str) -> str:
        calls.append((repo_id, filename, repo_type, revision))
        return str(root / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr(hub_mod, "hub_reachable", lambda timeout=3.0: True)
    corpus = load_corpus(ts_cfg(None, tmp_path / "cache", revision="abc123"), progress=False)
    assert documents(corpus, "train") == data["train"] and documents(corpus, "val") == data["val"]
    assert calls == [
        ("roneneldan/TinyStories", "TinyStoriesV2-GPT4-train.txt", "dataset", "abc123"),
        ("roneneldan/TinyStories", "TinyStoriesV2-GPT4-valid.txt", "dataset", "abc123"),
    ]  # each file fetched once, though the training file is read twice (tokenizer, then ids)
