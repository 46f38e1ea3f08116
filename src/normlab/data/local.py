"""Real corpora on disk: the files of a local copy of TinyStories and of any local text corpus (which of a
local copy and the Hub TinyStories comes from: `normlab.data.tinystories`).

Local layouts understood under `data.path` (searched recursively, hidden folders skipped):

- the official TinyStories text files, stories separated by ``<|endoftext|>``:
  ``TinyStoriesV2-GPT4-train.txt`` / ``TinyStoriesV2-GPT4-valid.txt`` (V2) and
  ``TinyStories-train.txt`` / ``TinyStories-valid.txt`` (V1), recognised by these names (V2 where both
  are there; ``data.version=v1`` or ``v2`` to choose);
- a Hub snapshot: parquet files with a ``text`` column, named by split
  (``data/train-00000-of-00004-….parquet``, ``data/validation-00000-of-00001-….parquet``, or
  ``train/0000.parquet`` folders);
- JSON lines with a ``text`` field, named by split (``train.jsonl``, ``validation.jsonl``, …);
- for ``data=text`` also plain ``.txt`` files, split into documents by ``data.separator``.

A file belongs to the training split when a word of its name (or of its folder's name) is ``train``,
to the validation split when it is ``validation``, ``valid``, ``val`` or ``dev``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.errors import UserError

from .cache import absolute
from .config import DataConfig
from .sources import Source, data_config, optional_int

log = logging.getLogger(__name__)

SEPARATOR = "<|endoftext|>"
OFFICIAL_TXT = {
    "v2": ("TinyStoriesV2-GPT4-train.txt", "TinyStoriesV2-GPT4-valid.txt"),
    "v1": ("TinyStories-train.txt", "TinyStories-valid.txt"),
}
FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".txt": "txt"}
TRAIN_WORDS = {"train"}
VAL_WORDS = {"validation", "valid", "val", "dev"}
READ_CHUNK = 1 << 22  # characters read at a time from a text file
FINGERPRINT_BYTES = 1 << 20


# ----------------------------------------------------------------------------------------------------
# Reading documents
# ----------------------------------------------------------------------------------------------------


def _open_error(path: Path, exc: Exception) -> UserError:
    return UserError(f"Cannot read {path} ({exc}); check the file or point data.path somewhere else.")


def _not_text(path: Path, why: str) -> UserError:
    return UserError(
        f"{path} is not UTF-8 text ({why}); normlab reads UTF-8 .txt and .jsonl files (and .parquet), so convert "
        "it to UTF-8 (e.g. iconv -t UTF-8) or move it out of data.path."
    )


def _decode_error(path: Path, exc: UnicodeDecodeError) -> UserError:
    bad = exc.object[exc.start : exc.start + 1]
    return _not_text(path, f"byte 0x{bad.hex()} is not UTF-8" if bad else exc.reason)


def read_txt(path: Path, separator: str | None) -> Iterator[str]:
    """Documents of a text file separated by `separator` (streamed: the file is never fully loaded).

    With `separator=None`, the end-of-text marker if the file's first chunk has one, else blank lines.
    A file that is not UTF-8, or holds NUL bytes (binary data, UTF-16), is refused with one sentence.
    """
    try:
        with open(path, "rb") as raw:
            if b"\x00" in raw.read(READ_CHUNK):  # before decoding: binary files rarely fail UTF-8 first
                raise _not_text(path, "it holds NUL bytes: binary data or UTF-16")
        with open(path, encoding="utf-8", errors="strict") as f:
            rest = ""
            while chunk := f.read(READ_CHUNK):
                if "\x00" in chunk:
                    raise _not_text(path, "it holds NUL bytes: binary data or UTF-16")
                if separator is None:
                    separator = SEPARATOR if SEPARATOR in chunk else "\n\n"
                parts = (rest + chunk).split(separator)
                rest = parts.pop()
                for doc in parts:
                    if doc := doc.strip():
                        yield doc
            if rest := rest.strip():
                yield rest
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    except OSError as exc:
        raise _open_error(path, exc) from exc


def read_jsonl(path: Path, text_field: str) -> Iterator[str]:
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(
                        f"Line {lineno} of {path} is not JSON ({exc.msg}); data.path must hold JSON lines, "
                        "one object per line."
                    ) from exc
                if isinstance(obj, str):
                    text = obj
                elif isinstance(obj, dict) and isinstance(obj.get(text_field), str):
                    text = obj[text_field]
                else:
                    raise UserError(
                        f"Line {lineno} of {path} has no string field {text_field!r}; set data.text_field to the "
                        "name of the field that holds the text."
                    )
                if text := text.strip():
                    yield text
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    except OSError as exc:
        raise _open_error(path, exc) from exc


def read_parquet(path: Path, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types for a broken file
        raise _open_error(path, exc) from exc
    if text_field not in pf.schema_arrow.names:
        raise UserError(
            f"{path} has no column {text_field!r} (it has {', '.join(pf.schema_arrow.names)}); set "
            "data.text_field to the column that holds the text."
        )
    for batch in pf.iter_batches(columns=[text_field], batch_size=8192):
        for text in batch.column(0).to_pylist():
            if text and (text := text.strip()):
                yield text


def read_documents(paths: Iterable[Path], fmt: str, text_field: str, separator: str | None) -> Iterator[str]:
    for p in paths:
        if fmt == "txt":
            yield from read_txt(p, separator)
        elif fmt == "jsonl":
            yield from read_jsonl(p, text_field)
        else:
            yield from read_parquet(p, text_field)


def fingerprint(path: Path) -> str:
    """Identifies a file's content cheaply: its size and a hash of its first and last MiB."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            h.update(f.read())
    return f"{size}:{h.hexdigest()[:16]}"


# ----------------------------------------------------------------------------------------------------
# Finding the files of each split
# ----------------------------------------------------------------------------------------------------


@dataclass
class Layout:
    """The files of a local corpus, by split."""

    fmt: str  # txt / jsonl / parquet
    description: str  # for messages and meta.json
    train: list[Path]
    val: list[Path] = field(default_factory=list)
    version: str | None = None  # v1 / v2 for the official TinyStories text files


def _split_of(path: Path, root: Path) -> str | None:
    def words(name: str) -> set[str]:
        return set(re.split(r"[^a-z0-9]+", name.lower()))

    for name in (path.stem, *[p.name for p in path.relative_to(root).parents if p.name][:1]):
        w = words(name)
        if w & TRAIN_WORDS:
            return "train"
        if w & VAL_WORDS:
            return "val"
    return None


def walk_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")]
    return out


def find_layout(root: Path, *, versions: Sequence[str] = (), allow_plain_txt: bool) -> Layout | None:
    """The best corpus layout under `root`, or None when nothing usable is there: the official TinyStories
    text files of the first of `versions` whose training file is there, else parquet, JSON lines or (with
    `allow_plain_txt`) text files named by split."""
    files = walk_files(root)
    base = root if root.is_dir() else root.parent
    for version in versions:
        train_name, val_name = OFFICIAL_TXT[version]
        train = [f for f in files if f.name == train_name]
        val = [f for f in files if f.name == val_name]
        if train:
            description = f"the official TinyStories {version.upper()} text files ({train_name}, {val_name})"
            return Layout("txt", description, train[:1], val[:1], version=version)
    by_fmt: dict[str, dict[str, list[Path]]] = {}
    for f in files:
        fmt = FORMATS.get(f.suffix.lower())
        if fmt is None or (fmt == "txt" and not allow_plain_txt):
            continue
        split = _split_of(f, base) or "none"
        by_fmt.setdefault(fmt, {}).setdefault(split, []).append(f)
    for fmt, label in (("parquet", "parquet files"), ("jsonl", "JSON lines files"), ("txt", "text files")):
        splits = by_fmt.get(fmt)
        if not splits:
            continue
        if splits.get("train"):
            return Layout(fmt, f"{label} split into train/validation", splits["train"], splits.get("val", []))
        if allow_plain_txt and splits.get("none") and not splits.get("val"):
            return Layout(fmt, f"{label} (validation held out)", splits["none"], [])
    return None


def resolve_path(cfg: DataConfig) -> Path:
    root = absolute(cfg.path)
    if not root.exists():
        raise UserError(
            f"data.path={cfg.path} does not exist ({root}); point data.path at your copy of the data."
        )
    return root


def listing(files: Iterable[Path], root: Path, limit: int = 6) -> str:
    names = [str(f.relative_to(root)) if root.is_dir() else f.name for f in files]
    if not names:
        return "it is empty"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return "it holds " + ", ".join(names[:limit]) + more


# ----------------------------------------------------------------------------------------------------
# Sources
# ----------------------------------------------------------------------------------------------------


class FileSource(Source):
    """Documents from local files; validation from the validation files, or every k-th document (k from
    `val_fraction`). `cfg` is the data group's typed config (`data_config`), as `normlab.data.tinystories`
    and `text_source` pass it."""

    def __init__(
        self,
        name: str,
        root: Path,
        layout: Layout,
        cfg: DataConfig,
        *,
        val_fraction: float | None,
    ) -> None:
        self.name = name
        self.root = root
        self.layout = layout
        self.text_field = str(cfg.text_field)
        self.separator = SEPARATOR if name == "tinystories" else (cfg.separator or None)
        self.max_train = optional_int(cfg.max_train_stories)
        self.max_val = optional_int(cfg.max_val_stories)
        self.val_every = None if layout.val else max(2, round(1 / float(val_fraction)))
        self.n_train = self.max_train
        self.n_val = self.max_val
        if layout.fmt == "parquet" and layout.val:
            rows = _parquet_rows(layout.train), _parquet_rows(layout.val)
            self.n_train = min(rows[0], self.max_train or rows[0])
            self.n_val = min(rows[1], self.max_val or rows[1])

    def _rel(self, p: Path) -> str:
        return str(p.relative_to(self.root)) if self.root.is_dir() else p.name

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "format": self.layout.fmt,
            "train_files": [[self._rel(p), fingerprint(p)] for p in self.layout.train],
            "val_files": [[self._rel(p), fingerprint(p)] for p in self.layout.val],
            "max_train_stories": self.max_train,
            "max_val_stories": self.max_val,
        }
        if self.layout.fmt == "txt":
            spec["separator"] = self.separator
        else:
            spec["text_field"] = self.text_field
        if self.val_every:
            spec["val_every"] = self.val_every
        return spec

    def _docs(self, paths: list[Path]) -> Iterator[str]:
        return read_documents(paths, self.layout.fmt, self.text_field, self.separator)

    def train_texts(self) -> Iterator[str]:
        docs = self._docs(self.layout.train)
        if self.val_every:
            docs = (d for i, d in enumerate(docs) if i % self.val_every != 0)
        return itertools.islice(docs, self.max_train)

    def val_texts(self) -> Iterator[str]:
        if self.val_every:
            docs = (d for i, d in enumerate(self._docs(self.layout.train)) if i % self.val_every == 0)
        else:
            docs = self._docs(self.layout.val)
        return itertools.islice(docs, self.max_val)

    def info(self) -> dict[str, Any]:
        return {
            "source": f"{self.layout.description} under {self.root}",
            "train_files": [str(p) for p in self.layout.train],
            "val_files": [str(p) for p in self.layout.val],
        }


def _parquet_rows(paths: list[Path]) -> int:
    import pyarrow.parquet as pq

    try:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    except Exception:  # unreadable: reading will say so properly later
        return 0


def text_source(cfg: DataConfig | Mapping[str, Any]) -> Source:
    cfg = data_config(cfg, "text")
    if not cfg.path:
        raise UserError(
            "data=text needs a corpus: set data.path=FILE_OR_DIR (.txt, .jsonl or .parquet files)."
        )
    root = resolve_path(cfg)
    layout = find_layout(root, allow_plain_txt=True)
    if layout is None:
        raise UserError(
            f"No corpus files found under data.path={root}: looked for .txt, .jsonl or .parquet files, but "
            f"{listing(walk_files(root), root)}; point data.path at a file or folder of those."
        )
    val_path = cfg.val_path
    if val_path:
        vroot = absolute(val_path)
        vfiles = (
            [f for f in walk_files(vroot) if FORMATS.get(f.suffix.lower()) == layout.fmt]
            if vroot.exists()
            else []
        )
        if not vfiles:
            raise UserError(
                f"data.val_path={val_path} holds no {layout.fmt} files like data.path does; point it at the "
                "validation file or folder."
            )
        layout.val = vfiles
    fraction = float(cfg.val_fraction)  # in (0, 1): TextData's rule
    return FileSource("text", root, layout, cfg, val_fraction=fraction)
