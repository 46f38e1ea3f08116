"""The `data` config group: one config per corpus (`data=synthetic|tinystories|text`), each with its knobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from normlab.knobs import Knobs, knob

# Optional[...] instead of `X | None`: OmegaConf reads these annotations at run time.
# ruff: noqa: UP007, UP045

MIN_BPE_VOCAB = 258  # 256 byte tokens + end-of-text + at least one merge
TINYSTORIES_VERSIONS = ("v1", "v2")


def _name(name: str) -> Any:
    return knob(name, "the corpus (data=NAME)", choices=lambda: tuple(DATA))


@dataclass(frozen=True)
class DataConfig(Knobs):
    """The keys every corpus has: its name and the tokenizer's."""

    GROUP: ClassVar[str] = "data"
    name: str = _name("synthetic")
    vocab_size: int = knob(
        4096, "size of the byte-level BPE vocabulary trained on the training texts", ge=MIN_BPE_VOCAB
    )
    tokenizer_train_stories: Optional[int] = knob(
        None, "train the tokenizer on only the first N training texts (null = all of them)", ge=1
    )
    tokenizer_path: Optional[str] = knob(
        None, "a tokenizer.json to use instead of training one (null = train a byte-level BPE)"
    )
    cache_dir: Optional[str] = knob(
        None, "where the tokenizer and token ids are cached; null = $NORMLAB_CACHE_DIR or the user cache dir"
    )


@dataclass(frozen=True)
class SyntheticData(DataConfig):
    """The embedded corpus: procedurally generated children's stories, written by normlab itself (offline)."""

    name: str = _name("synthetic")
    vocab_size: int = knob(
        4096,
        "size of the byte-level BPE vocabulary trained on the training stories; an upper bound: this corpus "
        "saturates at about 2.9k tokens (TokenCorpus.vocab_size is the tokenizer's real size)",
        ge=MIN_BPE_VOCAB,
    )
    n_train_stories: int = knob(
        50000,
        "number of generated training stories. 50k are about 11M tokens: a 32x128 batch sees each token about "
        "twice in 5k steps",
        ge=1,
    )
    n_val_stories: int = knob(
        2000, "number of validation stories (from a seed stream disjoint from training's)", ge=1
    )
    corpus_seed: int = knob(
        1234,
        "seed of the story generator; independent of the training seed so every run sees the same corpus",
        ge=0,
    )


@dataclass(frozen=True)
class TinyStoriesData(DataConfig):
    """TinyStories (Eldan & Li 2023): short stories written by GPT-3.5/GPT-4 for 3-4 year olds."""

    name: str = _name("tinystories")
    path: Optional[str] = knob(
        None,
        "a local copy (a folder: the official .txt files, a Hub snapshot of parquet files, or JSON lines); "
        "null = download from the Hugging Face Hub through `datasets` (cached in the usual HF cache)",
    )
    hub_id: str = knob("roneneldan/TinyStories", "the Hub dataset")
    revision: str = knob(
        "main", "its revision (a branch, tag or commit hash: pin a commit to freeze the data)"
    )
    version: Optional[str] = knob(
        None,
        "v2 = the GPT-4-only stories (TinyStoriesV2-GPT4-*.txt), v1 = the original set (TinyStories-*.txt, the "
        "Hub's parquet splits); null = recognised from the file names under data.path (V2 where both are "
        "there), v2 from the Hub",
        choices=TINYSTORIES_VERSIONS,
    )
    max_train_stories: Optional[int] = knob(
        None, "use only the first N training stories (null = all): e.g. 100000 for CPU runs", ge=1
    )
    max_val_stories: Optional[int] = knob(
        None, "use only the first N validation stories (null = all): e.g. 5000 for CPU runs", ge=1
    )
    text_field: str = knob("text", "the field (JSON lines) or column (parquet) holding the story text")


@dataclass(frozen=True)
class TextData(DataConfig):
    """Bring your own corpus: local .txt, .jsonl or .parquet files."""

    name: str = _name("text")
    path: Optional[str] = knob(
        None,
        "a file or a folder (required); files whose names say train / validation (valid, val, dev) form the two "
        "splits, otherwise every file is training data and validation documents are held out",
    )
    val_path: Optional[str] = knob(
        None, "a separate validation file or folder (null = use validation files under path, or hold out)"
    )
    val_fraction: float = knob(
        0.01,
        "with no validation files: this fraction of documents (every k-th one) is held out for validation",
        gt=0,
        lt=1,
    )
    separator: Optional[str] = knob(
        None,
        'what separates documents in .txt files; null = "<|endoftext|>" if the file uses it, else blank lines',
    )
    text_field: str = knob("text", "the field (JSON lines) or column (parquet) holding the text")
    max_train_stories: Optional[int] = knob(
        None, "use only the first N training documents (null = all)", ge=1
    )
    max_val_stories: Optional[int] = knob(
        None, "use only the first N validation documents (null = all)", ge=1
    )


DATA: dict[str, type[DataConfig]] = {
    "synthetic": SyntheticData,
    "tinystories": TinyStoriesData,
    "text": TextData,
}
