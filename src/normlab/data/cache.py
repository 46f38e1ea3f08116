"""The token cache: tokenizer + train/validation token ids + metadata, keyed by what determines them.

Layout of one cache entry, ``<root>/<name>-<key>/``::

    tokenizer.json   the tokenizer (`tokenizers` JSON)
    train.bin        training token ids, a flat uint16 array (uint32 when the vocabulary needs it)
    val.bin          validation token ids, same dtype
    meta.json        written last: dtype, token counts, vocab size, end-of-text id, the key's inputs

An entry is built in a temporary folder next to it (``.<name>-<key>.*.build``) and renamed into place
when every file, `meta.json` last, is written and fsynced, so an entry either exists whole or not at all:
a failed, killed or interrupted build leaves nothing behind (its lock file and, if it created it, an empty
cache root are removed too). Builds happen under a file lock (``<root>/<name>-<key>.lock``): parallel jobs
that need the same entry build it once and the others wait, then read it.

`meta.json` records each file's size, SHA-256 and modification time. Opening an entry checks the sizes,
and re-hashes any file whose modification time changed since the build (so a file overwritten in place,
even with garbage of the same size, is caught without hashing gigabytes at every start); an entry that does
not match is rebuilt, with a warning saying which file was wrong.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs
from filelock import FileLock, Timeout
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from normlab.errors import UserError
from normlab.io import atomic_write, fsync_dir, write_json_atomic

from .tokenizer import EOT, encode_many

log = logging.getLogger(__name__)

# Bump KEY_VERSION when the meaning of the token files changes (entries then get new folders); bump
# FORMAT_VERSION when only meta.json's layout changes (old entries are then rebuilt in place).
KEY_VERSION = 1
FORMAT_VERSION = 2
FILES = ("tokenizer.json", "train.bin", "val.bin")
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
    blob = json.dumps({"format_version": KEY_VERSION, **spec}, sort_keys=True, separators=(",", ":"))
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


def entry_problem(entry: Path, meta: dict[str, Any]) -> str | None:
    """Why a complete-looking entry does not match its meta.json (a file missing, resized, or with other
    contents), or None when it matches. Files whose modification time is unchanged since the build are
    trusted after the size check; the others are hashed."""
    for name in FILES:
        record = meta["files"][name]
        try:
            st = (entry / name).stat()
        except OSError:
            return f"{name} is missing"
        if st.st_size != record["bytes"]:
            return f"{name} has {st.st_size} bytes where meta.json recorded {record['bytes']}"
        if st.st_mtime_ns != record["mtime_ns"] and sha256_file(entry / name) != record["sha256"]:
            return f"{name} was changed after the build: its checksum does not match"
    itemsize = np.dtype(meta["dtype"]).itemsize
    for split in ("train", "val"):
        if meta["files"][f"{split}.bin"]["bytes"] != int(meta[f"{split}_tokens"]) * itemsize:
            return f"{split}.bin does not hold the {meta[f'{split}_tokens']} tokens meta.json records"
    return None


def read_valid_meta(entry: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The entry's metadata if the entry is complete, belongs to `spec` and matches its checksums, else None
    (logging why, when an entry is there but damaged)."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    try:
        if meta.get("format_version") != FORMAT_VERSION or meta.get("spec") != spec:
            return None
        problem = entry_problem(entry, meta)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = f"meta.json is unreadable ({type(exc).__name__})"
    if problem is not None:
        log.warning("the data cache %s is damaged (%s); rebuilding it", entry, problem)
        return None
    return meta


# ----------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------


class HashingWriter:
    """A binary file wrapper that hashes and counts what goes through it."""

    def __init__(self, f: Any) -> None:
        self.f, self.sha256, self.bytes = f, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.bytes += len(data)
        return self.f.write(data)


def file_record(path: Path, sha256: str) -> dict[str, Any]:
    st = path.stat()
    return {"bytes": st.st_size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}


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
) -> tuple[int, int, str]:
    """Encode `texts` in parallel batches into a flat id file, one end-of-text id after each text.

    Returns (number of tokens, number of texts, SHA-256 of the file).
    """
    n_tokens = n_texts = 0
    bar = tqdm(total=total, desc=desc, unit=" stories", disable=not progress_enabled(progress), leave=False)
    with atomic_write(dest) as raw:
        f = HashingWriter(raw)
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
    return n_tokens, n_texts, f.sha256.hexdigest()


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
    """Write every file of a cache entry into the (empty, temporary) folder `entry`. Returns the metadata.

    `info()` is called once the texts were read and adds source facts (files used, ...) to the metadata.
    """
    t0 = time.perf_counter()
    entry.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer()
    eot_id = tok.token_to_id(EOT)
    vocab_size = tok.get_vocab_size()
    dtype = dtype_for(vocab_size)
    tok_text = tok.to_str().encode()
    with atomic_write(entry / "tokenizer.json") as f:
        f.write(tok_text)
    n_train_tok, n_train_txt, train_sha = write_tokens(
        tok,
        train_texts(),
        entry / "train.bin",
        dtype,
        eot_id,
        desc="tokenizing train",
        total=n_train,
        progress=progress,
    )
    n_val_tok, n_val_txt, val_sha = write_tokens(
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
        "tokenizer_sha256": hashlib.sha256(tok_text).hexdigest(),
        "files": {
            "tokenizer.json": file_record(entry / "tokenizer.json", hashlib.sha256(tok_text).hexdigest()),
            "train.bin": file_record(entry / "train.bin", train_sha),
            "val.bin": file_record(entry / "val.bin", val_sha),
        },
        "build_seconds": round(time.perf_counter() - t0, 3),
        "built_by_pid": os.getpid(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **info(),
    }
    write_json_atomic(entry / "meta.json", meta)
    return meta


def writable_error(root: Path, exc: OSError) -> UserError:
    return UserError(
        f"Cannot write the data cache under {root} ({exc.strerror or exc}); set data.cache_dir=DIR or the "
        f"{ENV_VAR} environment variable to a writable directory."
    )


def get_or_build(
    root: Path,
    name: str,
    spec: dict[str, Any],
    build: Callable[[Path], dict[str, Any]],
    check: Callable[[], None] | None = None,
) -> tuple[Path, dict]:
    """Return (entry directory, metadata), building the entry with `build(folder)` if needed; `check()`
    runs first when it is (it raises if the data cannot be had: nothing is created, nothing said about
    building).

    Fast path: a valid entry is used without taking the lock (reading never needs write access).
    """
    entry = root / f"{name}-{key_digest(spec)}"
    meta = read_valid_meta(entry, spec)
    if meta is not None:
        return entry, meta
    if check is not None:
        check()
    created_root = not root.exists()
    lock_path = root / f"{entry.name}.lock"
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_path))
        try:
            lock.acquire(timeout=0.05)
        except Timeout:
            log.info("waiting for another process to finish building the data cache %s", entry)
            lock.acquire()
    except OSError as exc:
        raise writable_error(root, exc) from exc
    built = False
    try:
        meta = read_valid_meta(entry, spec)  # someone else may have built it while we waited
        if meta is None:
            for stale in root.glob(f".{entry.name}.*.build"):  # left by a killed build; we hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            log.info("building the data cache %s", entry)
            meta = _build_into(root, entry, build)
        built = True
    finally:
        lock.release()
        if not built:  # leave nothing behind: no lock file, no empty cache root we made
            with contextlib.suppress(OSError):
                lock_path.unlink()
            if created_root:
                with contextlib.suppress(OSError):
                    root.rmdir()
    return entry, meta


def _build_into(root: Path, entry: Path, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Build in a temporary folder and rename it to `entry` (replacing a damaged one); on any failure the
    temporary folder goes and `entry` is as it was."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".build", dir=root))
    except OSError as exc:
        raise writable_error(root, exc) from exc
    try:
        meta = build(tmp)
        if entry.exists():
            shutil.rmtree(entry)
        os.rename(tmp, entry)
        fsync_dir(root)
        return meta
    except OSError as exc:
        # errors writing the cache are the user's to fix; errors reading the data are raised
        # (as UserError) by the sources themselves
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"The disk holding the data cache {root} is full; free some space or set "
                f"data.cache_dir=DIR or {ENV_VAR} to a directory on a disk with room."
            ) from exc
        if exc.filename is not None and str(exc.filename).startswith(str(root)):
            raise writable_error(root, exc) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
