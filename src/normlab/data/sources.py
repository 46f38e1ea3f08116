"""Where stories come from: each source yields training and validation texts and a cheap key.

A source's `spec` must be computable without reading the data (it keys the token cache, and a
second run must start instantly), and must change whenever the texts it yields would change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tqdm.auto import tqdm

from .cache import progress_enabled
from .config import DATA, DataConfig
from .synthetic import GENERATOR_VERSION, TRAIN_STREAM, VAL_STREAM, generate_story


class Source:
    """Training and validation texts of one corpus."""

    name: str = ""
    n_train: int | None = None  # number of training texts when known up front (progress bars)
    n_val: int | None = None

    @property
    def spec(self) -> dict[str, Any]:
        raise NotImplementedError

    def train_texts(self) -> Iterable[str]:
        raise NotImplementedError

    def val_texts(self) -> Iterable[str]:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """Extra facts for the cache's meta.json (after the texts were read)."""
        return {}

    def check_readable(self) -> None:
        """Raise UserError now if the texts cannot be had at all (the Hub offline, nothing cached): called
        before a cache build starts, so that its one sentence comes before any "building" line."""


def data_config(cfg: DataConfig | Mapping[str, Any], option: str) -> DataConfig:
    """`cfg` (a `data` group, possibly partial, or already its typed config) as OPTION's config
    (normlab.data.config): the keys it leaves out take their defaults there, and a value outside its rule is
    InvalidConfig naming the key."""
    return DATA[option].of(cfg)


def optional_int(value: Any) -> int | None:
    """A count the config declares as a whole number or null (checked by its rule), as an int or None."""
    return None if value is None else int(value)


class SyntheticSource(Source):
    """The embedded corpus (see `normlab.data.synthetic`), generated in memory.

    Validation stories come from their own seed stream; any that happen to equal a training story
    are dropped, so the two splits never share a story.
    """

    name = "synthetic"

    def __init__(self, cfg: DataConfig | Mapping[str, Any], progress: bool = True) -> None:
        cfg = data_config(cfg, self.name)
        self.n_train = int(cfg.n_train_stories)
        self.n_val = int(cfg.n_val_stories)
        self.seed = int(cfg.corpus_seed)
        self.progress = progress
        self._train: list[str] | None = None
        self._val: list[str] | None = None
        self._dropped = 0

    @property
    def spec(self) -> dict[str, Any]:
        return {
            "generator_version": GENERATOR_VERSION,
            "n_train_stories": self.n_train,
            "n_val_stories": self.n_val,
            "corpus_seed": self.seed,
        }

    def _generate(self, n: int, stream: str) -> list[str]:
        it = range(n)
        if progress_enabled(self.progress):
            it = tqdm(it, desc=f"generating {stream} stories", unit=" stories", leave=False)
        return [generate_story(self.seed, i, stream) for i in it]

    def train_texts(self) -> list[str]:
        if self._train is None:
            self._train = self._generate(self.n_train, TRAIN_STREAM)
        return self._train

    def val_texts(self) -> list[str]:
        if self._val is None:
            seen = set(self.train_texts())
            val = self._generate(self.n_val, VAL_STREAM)
            self._val = [s for s in val if s not in seen]
            self._dropped = len(val) - len(self._val)
        return self._val

    def info(self) -> dict[str, Any]:
        return {"val_stories_dropped_as_duplicates": self._dropped}
