"""Small corpora in each layout real TinyStories copies come in, filled with our own generated stories."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from normlab.data.synthetic import TRAIN_STREAM, VAL_STREAM, generate_stories

LAYOUTS = ("v2txt", "v1txt", "parquet", "parquet-folders", "jsonl")


def stories(n: int, seed: int, split: str) -> list[str]:
    return generate_stories(n, seed, stream=TRAIN_STREAM if split == "train" else VAL_STREAM)


def write_layout(root: Path, layout: str, n_train: int, n_val: int, seed: int = 5) -> dict[str, list[str]]:
    """Write `layout` under `root`; returns the stories of each split, in file order."""
    root.mkdir(parents=True, exist_ok=True)
    data = {"train": stories(n_train, seed, "train"), "val": stories(n_val, seed, "val")}
    if layout in ("v2txt", "v1txt"):
        # as in the official files: each story, then a line holding only the end-of-text marker
        names = {
            "v2txt": ("TinyStoriesV2-GPT4-train.txt", "TinyStoriesV2-GPT4-valid.txt"),
            "v1txt": ("TinyStories-train.txt", "TinyStories-valid.txt"),
        }[layout]
        for name, split in zip(names, ("train", "val"), strict=True):
            (root / name).write_text("".join(f"{s}\n<|endoftext|>\n" for s in data[split]), encoding="utf-8")
    elif layout == "parquet":
        # a Hub snapshot: dataset card, data/<split>-NNNNN-of-NNNNN-<hash>.parquet, a hidden HF cache folder
        import pyarrow as pa
        import pyarrow.parquet as pq

        (root / "README.md").write_text("---\nconfigs:\n- config_name: default\n---\n")
        (root / "data").mkdir()
        half = len(data["train"]) // 2
        shards = [data["train"][:half], data["train"][half:]]
        for i, shard in enumerate(shards):
            pq.write_table(
                pa.table({"text": shard}),
                root / "data" / f"train-{i:05d}-of-{len(shards):05d}-a1b2c3d4.parquet",
            )
        pq.write_table(
            pa.table({"text": data["val"]}), root / "data" / "validation-00000-of-00001-e5f6.parquet"
        )
        hidden = root / ".cache" / "huggingface"
        hidden.mkdir(parents=True)
        (hidden / "train-junk.jsonl").write_text('{"text": "must never be read"}\n')
    elif layout == "parquet-folders":
        # the Hub's parquet conversion: <config>/<split>/NNNN.parquet
        import pyarrow as pa
        import pyarrow.parquet as pq

        for split, folder in (("train", "train"), ("val", "validation")):
            (root / "default" / folder).mkdir(parents=True)
            pq.write_table(pa.table({"text": data[split]}), root / "default" / folder / "0000.parquet")
    elif layout == "jsonl":
        for split, name in (("train", "train.jsonl"), ("val", "validation.jsonl")):
            with open(root / name, "w", encoding="utf-8") as f:
                for i, s in enumerate(data[split]):
                    f.write(json.dumps({"text": s, "id": i}) + "\n")
    else:
        raise ValueError(layout)
    return data


def prepare_in_child(cfg: dict[str, Any], delay: float) -> tuple[int, str, str]:
    """Runs in a spawned process: load the corpus, counting builds (each build is slowed down)."""
    import normlab.data.cache as c

    builds = []
    real = c.build_entry

    def slow(*args: Any, **kwargs: Any) -> Any:
        builds.append(1)
        time.sleep(delay)  # keep the lock long enough that the other process must wait for it
        return real(*args, **kwargs)

    c.build_entry = slow
    from normlab.data import load_corpus

    corpus = load_corpus(cfg, progress=False)
    digest = hashlib.sha256(np.asarray(corpus.train).tobytes() + np.asarray(corpus.val).tobytes()).hexdigest()
    return len(builds), digest, str(corpus.cache_dir)
