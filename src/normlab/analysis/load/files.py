"""A run directory's own files, and nothing else: regular files inside it, reached without a symbolic link.

A run directory can come from anywhere (a colleague's sweep, an archive), so a report treats it as data: a
`.hydra/config.yaml` that is a symbolic link to `/etc/passwd`, a `metrics.jsonl` that is a FIFO (a read
would block for ever) or a device is not read, and says so. Each component below the run directory is
opened with `O_NOFOLLOW` relative to the one above it (`dir_fd`), so a link swapped in between a check and
the read is refused too; only the run directory itself, which the user named (or which lies inside the
sweep directory they named, reached without a link), is taken as it is.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

LINK = "is a symbolic link, not followed: a report reads only the run's own files"


class NotReadable(Exception):
    """A file of a run directory that exists but is not read; its text says why, after the file's name."""


def read_inside(run_dir: Path, name: str) -> bytes | None:
    """The bytes of the regular file `name` (relative, e.g. ".hydra/config.yaml") inside `run_dir`; None when
    there is no such file; NotReadable when there is one but it is a symbolic link (at any component), not a
    regular file, or cannot be opened."""
    parts = Path(name).parts
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    opened: list[int] = []
    try:
        try:
            fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        opened.append(fd)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            shown = "/".join(parts[: i + 1])
            try:
                fd = os.open(part, flags | (os.O_NONBLOCK if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as e:
                raise NotReadable(f"{shown} {_why(e, run_dir / shown)}") from None
            opened.append(fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable(f"{name} is not a regular file (a directory, FIFO, socket or device): not read")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:  # reading it failed (an I/O error, a file that vanished half-way)
        raise NotReadable(f"{name} cannot be read ({e.strerror or e})") from None
    finally:
        for fd in opened:
            os.close(fd)


def text_inside(run_dir: Path, name: str) -> str | None:
    """`read_inside` as text (UTF-8; a byte that is not UTF-8 shown as U+FFFD)."""
    data = read_inside(run_dir, name)
    return None if data is None else data.decode("utf-8", errors="replace")


def _why(e: OSError, path: Path) -> str:
    if e.errno in (errno.ELOOP, errno.EMLINK) or path.is_symlink():
        return LINK
    if e.errno == errno.ENOTDIR:
        return "is not a directory: not read"
    return f"cannot be opened ({e.strerror or e})"


def present(run_dir: Path, name: str) -> bool:
    """Whether anything by that name is there (a link or a FIFO included: it is then reported, not read)."""
    return os.path.lexists(run_dir / name)
