"""TinyStories from `data.path` when it is set, else from the Hugging Face Hub: which of the two, and which
version (`data.version`), in one sentence on the console. The files on disk are read by
`normlab.data.local`, the Hub by `normlab.data.hub`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from normlab.errors import UserError

from .config import DataConfig
from .hub import HubSource
from .local import OFFICIAL_TXT, FileSource, Layout, find_layout, listing, resolve_path, walk_files
from .sources import Source, data_config

log = logging.getLogger(__name__)


HUB_DEFAULT_VERSION = "v2"


def tinystories_source(cfg: DataConfig | Mapping[str, Any], progress: bool = True) -> Source:
    """TinyStories from `data.path` (the official V2 or V1 text files recognised by their names, V2 where
    both are there, `data.version` to choose; or parquet / JSON lines named by split), else from the Hub."""
    cfg = data_config(cfg, "tinystories")
    version = cfg.version  # v1, v2 (TinyStoriesData's choices), or None: recognised from the files
    if not cfg.path:
        return HubSource(cfg, version or HUB_DEFAULT_VERSION, progress)
    root = resolve_path(cfg)
    versions = (version,) if version else ("v2", "v1")
    layout = find_layout(root, versions=versions, allow_plain_txt=False)
    official = " or ".join(f"{OFFICIAL_TXT[v][0]} and {OFFICIAL_TXT[v][1]}" for v in versions)
    looked_for = (
        f"{official}{f' (data.version={version})' if version else ''}, or parquet / JSON lines files named "
        "by split (train…, validation…)"
    )
    if layout is None:
        hint = ""
        if version:
            other = "v1" if version == "v2" else "v2"
            if any(f.name == OFFICIAL_TXT[other][0] for f in walk_files(root)):
                hint = f" (it holds the {other.upper()} files: set data.version={other}, or leave it out)"
        raise UserError(
            f"No TinyStories files found under data.path={root}: looked for {looked_for}, but "
            f"{listing(walk_files(root), root)}{hint}; point data.path at the folder that holds them."
        )
    if not layout.val:
        val_name = OFFICIAL_TXT[layout.version][1] if layout.version else "the validation file"
        raise UserError(
            f"Found the TinyStories training files under data.path={root} but no validation files "
            f"(looked for {val_name} or files named validation…); add them next to the training files."
        )
    log.info(
        "data=tinystories: using %s under %s%s",
        layout.description,
        root,
        _version_note(layout, version, root),
    )
    return FileSource("tinystories", root, layout, cfg, val_fraction=None)


def _version_note(layout: Layout, version: str | None, root: Path) -> str:
    """How the files were chosen: by data.version, or recognised by their names (and what else is there)."""
    if layout.version is None:
        return " (data.version only picks between the official .txt files)" if version else ""
    if version:
        return f" (data.version={version})"
    other = "v1" if layout.version == "v2" else "v2"
    also = any(f.name == OFFICIAL_TXT[other][0] for f in walk_files(root))
    there = f"; the {other.upper()} files are there too: data.version={other} to use them" if also else ""
    return f" (recognised by their names{there})"
