"""Checkpoints: model, optimizer, scaler, step and every RNG state, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from normlab.errors import UserError

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file, then rename: a crash mid-write never leaves a truncated checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def resolve_checkpoint(resume: str | os.PathLike) -> Path:
    """A checkpoint file, or a run directory whose checkpoints/last.pt is taken."""
    path = Path(resume).expanduser()
    if path.is_dir():
        path = path / CHECKPOINT_DIR / LAST
    if not path.is_file():
        raise UserError(
            f"No checkpoint found at {path}; pass train.resume=RUN_DIR or a .pt file that exists."
        )
    return path


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    return torch.load(path, map_location=device, weights_only=False)
