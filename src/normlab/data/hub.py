"""TinyStories from the Hugging Face Hub through `datasets` / `huggingface_hub`, cached as they cache it;
offline (no network, or HF_HUB_OFFLINE) it uses what those caches hold, else says in one sentence what to
do. Local copies and other corpora are read by `normlab.data.local`."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from normlab.errors import UserError

from .config import TinyStoriesData
from .local import OFFICIAL_TXT, SEPARATOR, read_txt
from .sources import Source, data_config, optional_int

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------
# The Hugging Face Hub
# ----------------------------------------------------------------------------------------------------

OFFLINE_MESSAGE = (
    "Cannot download TinyStories (no network connection{why}) and data.path is not set; point data.path=DIR at "
    "a downloaded copy, or train on the embedded corpus with data=synthetic."
)
_TRUE = {"1", "true", "yes", "on"}


def _env_offline() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check of the Hub endpoint, so that no network fails in seconds, not after retries."""
    if _env_offline():
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # only the proxy knows; let the real request decide
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """Put huggingface_hub and datasets in offline mode (cached files only) for the duration."""
    if not offline:
        yield
        return
    import datasets.config as dconf
    import huggingface_hub.constants as hconst

    # both libraries read these module constants once at import, so the environment variables would be too
    # late; public names, checked by tests/test_private_apis.py
    saved = hconst.HF_HUB_OFFLINE, dconf.HF_HUB_OFFLINE
    hconst.HF_HUB_OFFLINE = dconf.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hconst.HF_HUB_OFFLINE, dconf.HF_HUB_OFFLINE = saved


class HubSource(Source):
    """TinyStories from the Hugging Face Hub, cached by `datasets` / `huggingface_hub` as usual.

    V1 loads the dataset's parquet splits with `datasets.load_dataset`; V2 (GPT-4 stories only) exists
    on the Hub as the official text files, fetched with `huggingface_hub` into the same Hub cache.
    Nothing is downloaded until the token cache needs building.
    """

    name = "tinystories"

    def __init__(self, cfg: TinyStoriesData, version: str, progress: bool) -> None:
        cfg = data_config(cfg, self.name)
        self.hub_id = str(cfg.hub_id)
        self.revision = str(cfg.revision)
        self.version = version
        self.max_train = optional_int(cfg.max_train_stories)
        self.max_val = optional_int(cfg.max_val_stories)
        self.n_train, self.n_val = self.max_train, self.max_val
        self.progress = progress
        self.text_field = str(cfg.text_field)
        self._offline: bool | None = None
        self._paths: dict[str, Path] = {}
        self._datasets: dict[str, Any] = {}

    @property
    def spec(self) -> dict[str, Any]:
        return {
            "hub_id": self.hub_id,
            "revision": self.revision,
            "version": self.version,
            "max_train_stories": self.max_train,
            "max_val_stories": self.max_val,
        }

    def _fail(self, exc: BaseException) -> UserError:
        if self._offline:
            return UserError(OFFLINE_MESSAGE.format(why=", and it is not in the Hugging Face cache"))
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return UserError(
            f"Could not load {self.hub_id} (revision {self.revision}) from the Hugging Face Hub ({first}); check "
            "data.hub_id, data.revision and the connection, or point data.path=DIR at a downloaded copy."
        )

    def _is_offline(self) -> bool:
        if self._offline is None:
            self._offline = not hub_reachable()
            if self._offline:
                log.info("no connection to the Hugging Face Hub: trying its local cache only")
        return self._offline

    def _call(self, fn: Callable[[], Any]) -> Any:
        offline = self._is_offline()
        if not self.progress:
            with contextlib.suppress(Exception):
                import datasets
                import huggingface_hub.utils

                datasets.disable_progress_bars()
                huggingface_hub.utils.disable_progress_bars()
        try:
            with _hub_offline(offline):
                return fn()
        except UserError:
            raise
        except Exception as exc:  # network, missing cache, unknown repo: all the user's to fix
            raise self._fail(exc) from exc

    def check_readable(self) -> None:
        """Offline, open what the Hugging Face caches hold now (raising the one sentence if they hold
        nothing), before the token cache says it is building; online, the download is part of the build."""
        if not self._is_offline():
            return
        if self.version == "v1":
            self._dataset("train")
            self._dataset("validation")
        else:
            self._v2_path(0)
            self._v2_path(1)

    def _dataset(self, split: str) -> Any:
        if split not in self._datasets:

            def load() -> Any:
                import datasets

                return datasets.load_dataset(self.hub_id, revision=self.revision, split=split)

            self._datasets[split] = self._call(load)
        return self._datasets[split]

    def _v1(self, split: str, limit: int | None) -> Iterator[str]:
        ds = self._dataset(split)
        if limit is not None:
            ds = ds.select(range(min(limit, len(ds))))
        for batch in ds.iter(batch_size=4096):
            for text in batch[self.text_field]:
                if text and (text := text.strip()):
                    yield text

    def _v2_path(self, which: int) -> Path:
        filename = OFFICIAL_TXT["v2"][which]
        if filename not in self._paths:

            def fetch() -> Path:
                from huggingface_hub import hf_hub_download

                return Path(
                    hf_hub_download(self.hub_id, filename, repo_type="dataset", revision=self.revision)
                )

            self._paths[filename] = self._call(fetch)
        return self._paths[filename]

    def _v2(self, which: int, limit: int | None) -> Iterator[str]:
        return itertools.islice(read_txt(self._v2_path(which), SEPARATOR), limit)

    def train_texts(self) -> Iterator[str]:
        return self._v1("train", self.max_train) if self.version == "v1" else self._v2(0, self.max_train)

    def val_texts(self) -> Iterator[str]:
        return self._v1("validation", self.max_val) if self.version == "v1" else self._v2(1, self.max_val)

    def info(self) -> dict[str, Any]:
        return {"source": f"{self.hub_id}@{self.revision} from the Hugging Face Hub ({self.version})"}
