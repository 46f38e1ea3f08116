"""The token cache: tokenizer + train/validation token ids + metadata, keyed by what determines them.

Layout of one cache entry, ``<root>/<name>-<key>/``::

    tokenizer.json   the tokenizer (`tokenizers` JSON)
    train.bin        training token ids, a flat uint16 array (uint32 when the vocabulary needs it)
    val.bin          validation token ids, same dtype
    meta.json        written last: dtype, token counts, vocab size, end-of-text id, the key's inputs

Every file is written to a temporary name and renamed into place, and `meta.json` goes last, so a
reader that finds a `meta.json` whose sizes match the files has a complete entry. Builds happen under
a file lock (``<root>/<name>-<key>.lock``): parallel jobs that need the same entry build it once and
the others wait, then read it. An entry whose files are missing or whose sizes disagree with
`meta.json` (a truncated copy, a killed build) is rebuilt.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
from filelock import FileLock, Timeout
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from normlab.errors import UserError

from .tokenizer import EOT, encode_many

log = logging.getLogger(__name__)

# Bump when the layout or the meaning of the files changes: old entries are then ignored.
FORMAT_VERSION = 1
ENV_VAR = "NORMLAB_CACHE_DIR"
ENCODE_BATCH = 4096  # stories per call into the (parallel) Rust encoder


def progress_enabled(progress: bool) -> bool:
    """Progress bars only when asked for and when a person is watching stderr."""
    try:
        return bool(progress) and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def absolute(path: str | os.PathLike[str]) -> Path:
    """A user-given path made absolute against the directory the command was started from.

    Under Hydra with `hydra.job.chdir=True` the working directory is the run directory, so relative
    paths are resolved against Hydra's original working directory instead.
    """
    p = Path(os.path.expandvars(str(path))).expanduser()
    if p.is_absolute():
        return p
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_original_cwd

        if HydraConfig.initialized():
            return Path(get_original_cwd()) / p
    except Exception:  # hydra missing or not running: plain cwd
        pass
    return p.resolve()


def cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    """`data.cache_dir`, else $NORMLAB_CACHE_DIR, else the user's cache directory for normlab."""
    if cache_dir not in (None, ""):
        return absolute(cache_dir)
    env = os.environ.get(ENV_VAR)
    if env:
        return absolute(env)
    return Path(platformdirs.user_cache_dir("normlab"))


def key_digest(spec: dict[str, Any]) -> str:
    """A short stable hash of a JSON-able spec (sorted keys, so dict order never matters)."""
    blob = json.dumps({"format_version": FORMAT_VERSION, **spec}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------------
# Reading and validating an entry
# ----------------------------------------------------------------------------------------------------


def read_valid_meta(entry: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The entry's metadata if the entry is complete and belongs to `spec`, else None."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION or meta.get("spec") != spec:
            return None
        itemsize = np.dtype(meta["dtype"]).itemsize
        for split in ("train", "val"):
            if (entry / f"{split}.bin").stat().st_size != int(meta[f"{split}_tokens"]) * itemsize:
                return None
        if sha256_file(entry / "tokenizer.json") != meta["tokenizer_sha256"]:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta


# ----------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_file(dest: Path, mode: str = "wb") -> Iterator[Any]:
    """Write to a temporary file next to `dest`, fsync it, and rename it over `dest` on success."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_tokens(
    tok: Tokenizer,
    texts: Iterable[str],
    dest: Path,
    dtype: np.dtype,
    eot_id: int,
    *,
    desc: str,
    total: int | None,
    progress: bool,
) -> tuple[int, int]:
    """Encode `texts` in parallel batches into a flat id file, one end-of-text id after each text.

    Returns (number of tokens, number of texts).
    """
    n_tokens = n_texts = 0
    bar = tqdm(total=total, desc=desc, unit=" stories", disable=not progress_enabled(progress), leave=False)
    with atomic_file(dest) as f:
        it = iter(texts)
        while batch := list(itertools.islice(it, ENCODE_BATCH)):
            flat: list[int] = []
            for ids in encode_many(tok, batch):
                flat.extend(ids)
                flat.append(eot_id)
            f.write(np.asarray(flat, dtype=dtype).tobytes())
            n_tokens += len(flat)
            n_texts += len(batch)
            bar.update(len(batch))
            bar.set_postfix(tokens=f"{n_tokens:,}", refresh=False)
    bar.close()
    return n_tokens, n_texts


def build_entry(
    entry: Path,
    spec: dict[str, Any],
    make_tokenizer: Callable[[], Tokenizer],
    train_texts: Callable[[], Iterable[str]],
    val_texts: Callable[[], Iterable[str]],
    *,
    n_train: int | None,
    n_val: int | None,
    info: Callable[[], dict[str, Any]] = dict,
    progress: bool,
) -> dict[str, Any]:
    """Build every file of a cache entry (the caller holds the lock). Returns the metadata.

    `info()` is called once the texts were read and adds source facts (files used, ...) to the metadata.
    """
    t0 = time.perf_counter()
    entry.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (entry / "meta.json").unlink()  # the entry is invalid until the new meta.json lands
    tok = make_tokenizer()
    eot_id = tok.token_to_id(EOT)
    vocab_size = tok.get_vocab_size()
    dtype = dtype_for(vocab_size)
    with atomic_file(entry / "tokenizer.json", "w") as f:
        f.write(tok.to_str())
    n_train_tok, n_train_txt = write_tokens(
        tok,
        train_texts(),
        entry / "train.bin",
        dtype,
        eot_id,
        desc="tokenizing train",
        total=n_train,
        progress=progress,
    )
    n_val_tok, n_val_txt = write_tokens(
        tok,
        val_texts(),
        entry / "val.bin",
        dtype,
        eot_id,
        desc="tokenizing validation",
        total=n_val,
        progress=progress,
    )
    if n_train_txt == 0 or n_val_txt == 0:
        split = "training" if n_train_txt == 0 else "validation"
        raise UserError(
            f"The {split} split of data={spec.get('name')} is empty; check data.path and the story limits "
            "(data.max_train_stories, data.max_val_stories)."
        )
    meta = {
        "format_version": FORMAT_VERSION,
        "spec": spec,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "eot_id": eot_id,
        "train_tokens": n_train_tok,
        "val_tokens": n_val_tok,
        "train_stories": n_train_txt,
        "val_stories": n_val_txt,
        "tokenizer_sha256": sha256_file(entry / "tokenizer.json"),
        "build_seconds": round(time.perf_counter() - t0, 3),
        "built_by_pid": os.getpid(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **info(),
    }
    with atomic_file(entry / "meta.json", "w") as f:
        json.dump(meta, f, indent=2)
    return meta


def writable_error(root: Path, exc: OSError) -> UserError:
    return UserError(
        f"Cannot write the data cache under {root} ({exc.strerror or exc}); set data.cache_dir=DIR or the "
        f"{ENV_VAR} environment variable to a writable directory."
    )


def get_or_build(
    root: Path, name: str, spec: dict[str, Any], build: Callable[[Path], dict[str, Any]]
) -> tuple[Path, dict]:
    """Return (entry directory, metadata), building the entry with `build(entry)` if needed.

    Fast path: a valid entry is used without taking the lock (reading never needs write access).
    """
    entry = root / f"{name}-{key_digest(spec)}"
    meta = read_valid_meta(entry, spec)
    if meta is not None:
        return entry, meta
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(root / f"{entry.name}.lock"))
        try:
            lock.acquire(timeout=0.05)
        except Timeout:
            log.info("waiting for another process to finish building the data cache %s", entry)
            lock.acquire()
    except OSError as exc:
        raise writable_error(root, exc) from exc
    try:
        meta = read_valid_meta(entry, spec)  # someone else may have built it while we waited
        if meta is None:
            log.info("building the data cache %s", entry)
            try:
                meta = build(entry)
            except OSError as exc:
                # errors writing the cache are the user's to fix; errors reading the data are raised
                # (as UserError) by the sources themselves
                if exc.errno == errno.ENOSPC:
                    raise UserError(
                        f"The disk holding the data cache {root} is full; free some space or set "
                        f"data.cache_dir=DIR or {ENV_VAR} to a directory on a disk with room."
                    ) from exc
                if exc.filename is not None and str(exc.filename).startswith(str(root)):
                    raise writable_error(root, exc) from exc
                raise
    finally:
        lock.release()
    return entry, meta
