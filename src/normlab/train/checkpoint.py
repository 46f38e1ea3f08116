"""Checkpoints: model, optimizer, scaler, step, every RNG state and the model's config, written atomically.

A checkpoint holds only tensors and plain containers (dict, list, str, int, float, bool, None), so it loads
with `torch.load(weights_only=True)`: opening one never runs code from the file. It also records the
resolved `model` config it was trained with, so resuming with a different model is refused in one sentence
naming the keys that differ, instead of a wall of `load_state_dict` errors.

It records, too, what the run computed with besides the model (`experiment`: the settings and the
corpus's identity, normlab.train.resume), so that a resume with another corpus, seed or optimizer is refused
rather than mixing two experiments in one run. Checkpoints written before either record still load; what
they lack cannot be checked and is said once.

`train.resume=RUN_DIR` takes the newest checkpoint there (the highest step among checkpoints/last.pt and
checkpoints/step_N.pt); an unreadable one (a truncated copy) is skipped with a warning if an older one is
readable. `train.resume=auto` does the same (`newest`).

A full disk while torch writes a checkpoint surfaces as torch's own RuntimeError raised while handling the
OSError of the failed write; `save_checkpoint` raises that OSError instead, naming the checkpoint, so the run
ends `failed` with one sentence instead of `crashed`.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from normlab.config.keys import flatten
from normlab.errors import InvalidConfig, UserError
from normlab.io import atomic_write, fsync_dir
from normlab.model.norms import built_settings

log = logging.getLogger("normlab")

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
STEP_FILE = re.compile(r"step_(\d+)\.pt")
FORMAT_KEY = "normlab_checkpoint"
FORMAT_VERSION = 1
MODEL_CONFIG_KEY = "model_config"
EXPERIMENT_KEY = "experiment"  # normlab.train.resume.experiment_record: settings and corpus identity
LAST_ROW_KEY = "last_row"  # the training row before it (step, loss): `same_history`
# how the keys of the `model` group are called on the command line, where that differs
KEY_NAMES = {
    "model.n_layers": "depth",
    "model.norm.name": "norm",
    "model.placement.name": "placement",
    "model.placement.post_fraction": "placement.post_fraction",
}


def step_file(step: int) -> str:
    return f"step_{step:06d}.pt"


def save_checkpoint(
    path: Path,
    state: Mapping[str, Any],
    model_config: Mapping[str, Any] | None = None,
    experiment: Mapping[str, Any] | None = None,
    last_row: Mapping[str, Any] | None = None,
) -> None:
    """Write `state` (a Trainer.state_dict), the model config, the experiment record and the last training
    row before it (`last_row_record`) to `path`, atomically and durably: a crash, a full disk or a kill
    mid-write leaves the previous file at `path` whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**state, FORMAT_KEY: FORMAT_VERSION}
    if model_config is not None:
        payload[MODEL_CONFIG_KEY] = dict(model_config)
    if experiment is not None:
        payload[EXPERIMENT_KEY] = dict(experiment)
    if last_row is not None:
        payload[LAST_ROW_KEY] = dict(last_row)
    with atomic_write(path) as f:
        try:
            torch.save(payload, f)
        except RuntimeError as exc:
            raise write_error(exc, path) from exc


def write_error(exc: RuntimeError, path: Path) -> BaseException:
    """The OSError behind torch's RuntimeError for a failed write (a full disk: ENOSPC), naming `path`; the
    RuntimeError itself when there is none (a bug)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError):
            return OSError(cause.errno, cause.strerror, str(path))
        cause = cause.__cause__ or cause.__context__
    return exc


@dataclass
class Checkpoint:
    path: Path
    state: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.state["step"])


def _read(path: Path, mmap: bool = False, verify: bool = False) -> dict[str, Any]:
    """The checkpoint's state. `verify` first checks every byte against the CRC-32 the archive records:
    torch.load checks none of them, so a file whose tensor data was damaged while its index stayed whole
    loads as garbage weights (or, memory-mapped, opens, and fails only when a damaged header is read)."""
    if verify:
        damaged = _damaged_member(path)
        if damaged is not None:
            raise ValueError(f"its {damaged} does not match the checksum the file records: damaged data")
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(state, dict) or "model" not in state or "step" not in state:
        raise ValueError("not a normlab checkpoint (no model state or step)")
    return state


def _damaged_member(path: Path) -> str | None:
    """The first member of the checkpoint's zip archive whose bytes fail their CRC-32 (None if all pass);
    raises for a file that is no zip archive at all (torch.load then says what it is)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except zipfile.BadZipFile:
        return None  # not an archive torch writes today (a legacy file, or garbage): torch.load decides


def _unreadable(path: Path, exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    return f"{path} cannot be read ({first})"


def candidates(directory: Path) -> list[Path]:
    """last.pt and step_N.pt in `directory` (RUN_DIR/checkpoints), newest step first (last.pt wins ties)."""
    found: list[tuple[float, int, Path]] = []
    for p in directory.glob("*.pt"):
        if p.name == LAST:
            try:
                found.append((int(_read(p, mmap=True)["step"]), 1, p))
            except Exception:  # unreadable: tried first all the same, so that the skip is reported
                found.append((float("inf"), 1, p))
        elif m := STEP_FILE.fullmatch(p.name):
            found.append((int(m.group(1)), 0, p))
    return [p for _, _, p in sorted(found, reverse=True)]


def readable(path: Path) -> bool:
    """Whether `path` opens as a normlab checkpoint whose bytes are all whole (its tensors checked against
    their checksums, not loaded)."""
    return opened(path) is not None and whole(path)


def opened(path: Path) -> dict[str, Any] | None:
    """The checkpoint's state with its tensors memory-mapped (none of their bytes read), None where it does
    not open as a normlab checkpoint."""
    try:
        return _read(path, mmap=True)
    except Exception:
        return None


def whole(path: Path) -> bool:
    """Whether every byte of the checkpoint matches the CRC-32 its archive records (it reads the file)."""
    try:
        return _damaged_member(path) is None
    except OSError:
        return False


def newest(directory: Path, at_most: int | None = None) -> tuple[Path, int] | None:
    """The newest readable checkpoint in `directory` (RUN_DIR/checkpoints) and its step, or None; with
    `at_most`, the newest of those at or before that step. Readable: every byte whole, so that a file whose
    tensor data was damaged is passed over here rather than failing the resume that picked it."""
    for p in candidates(directory):
        state = opened(p)
        if state is None or (at_most is not None and int(state["step"]) > at_most) or not whole(p):
            continue  # a damaged file (a truncated copy): an older one may do
        return p, int(state["step"])
    return None


# ----------------------------------------------------------------------------------------------------
# One history per run directory: the row a checkpoint follows, and the checkpoints a rewind abandons
# ----------------------------------------------------------------------------------------------------


def last_row_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint keeps of the last training row before it (its step and loss): a resume in place
    checks it against metrics.jsonl, so that a checkpoint of another history is never continued."""
    return {"step": int(row["step"]), "loss": _plain_loss(row["loss"])}


def _plain_loss(value: Any) -> float | str:
    number = float(value)
    return number if math.isfinite(number) else str(number)  # as metrics.jsonl writes nan and inf


def same_history(state: Mapping[str, Any], losses: Mapping[int, Any]) -> bool:
    """Whether the checkpoint's state follows the rows `losses` (step → the training loss metrics.jsonl
    holds): its recorded last row is there with the same loss. A checkpoint without the record (saved before
    normlab kept it) or whose row is not there cannot be told apart and is taken as belonging."""
    record = state.get(LAST_ROW_KEY)
    if not isinstance(record, Mapping) or "step" not in record or "loss" not in record:
        return True
    step = int(record["step"])
    if step not in losses:
        return True
    return _same_loss(record["loss"], losses[step])


def _same_loss(a: Any, b: Any) -> bool:
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return x == y or (math.isnan(x) and math.isnan(y))


RETIRED_DIR = "retired"  # RUN_DIR/checkpoints/retired/: checkpoints of an abandoned history, kept unread


def retire(directory: Path, after: int) -> Path | None:
    """Move every checkpoint in `directory` (RUN_DIR/checkpoints) of a step after `after` — and a last.pt
    that cannot be read, whose step is unknown — into `retired/after_step_N-TIME/`, where nothing resumes
    from them: a run continued (or started again) from step `after` abandons the history they belong to.
    Returns the folder they went to, None if there were none. Each move is a rename, so a kill half-way
    leaves every file whole, either still here or retired."""
    abandoned = []
    for p in directory.glob("*.pt") if directory.is_dir() else ():
        if p.name == LAST:
            try:
                step: float = int(_read(p, mmap=True)["step"])
            except Exception:
                step = float("inf")
        elif m := STEP_FILE.fullmatch(p.name):
            step = int(m.group(1))
        else:
            continue
        if step > after:
            abandoned.append(p)
    if not abandoned:
        return None
    folder = directory / RETIRED_DIR / f"after_step_{after:06d}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    for p in sorted(abandoned):
        os.replace(p, folder / p.name)
    fsync_dir(directory)
    log.info(
        "moved %s to %s: checkpoints of the history this run abandons by going on from step %d",
        ", ".join(p.name for p in sorted(abandoned)),
        folder,
        after,
    )
    return folder


def resolve(resume: str | os.PathLike[str]) -> Path:
    """The absolute path `train.resume` names (relative to where the command was started)."""
    from normlab.data.cache import absolute

    return absolute(resume)


def find_checkpoint(resume: str | os.PathLike[str], mmap: bool = False) -> Checkpoint:
    """Load the checkpoint `train.resume` names: a .pt file, or the newest readable one of a run directory.
    `mmap`: tensors memory-mapped rather than read (to check a checkpoint without loading it).

    Raises UserError (status failed) when there is none or none can be read.
    """
    path = resolve(resume)
    if not path.exists():
        raise UserError(
            f"train.resume={resume} does not exist ({path}); pass a run directory that has checkpoints/ or a "
            ".pt file."
        )
    if path.exists() and not path.is_file() and not path.is_dir():
        raise UserError(
            f"train.resume={resume} is neither a checkpoint file nor a directory ({path} is a device, FIFO or "
            "socket); pass a run directory that has checkpoints/ or a .pt file."
        )
    if path.is_file():
        try:
            return Checkpoint(path, _read(path, mmap=mmap, verify=True))
        except Exception as exc:
            raise UserError(
                f"The checkpoint {_unreadable(path, exc)}: it is damaged (cut short, or its bytes changed) or not "
                "a normlab checkpoint; resume "
                "from another checkpoint (train.resume=FILE) or start afresh without train.resume."
            ) from None
    directory = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
    run_dir = directory.parent if directory.name == CHECKPOINT_DIR else directory
    files = candidates(directory)
    if not files:
        # starting again from step 0 is a fix only where a run trained (its rows or summary are there)
        restart = (
            f", or run train.resume=auto hydra.run.dir={path}, which restarts the run there from step 0"
            if any((run_dir / f).is_file() for f in ("metrics.jsonl", "summary.json"))
            else ""
        )
        raise UserError(
            f"No checkpoint in {path}: looked for {CHECKPOINT_DIR}/{LAST} and {CHECKPOINT_DIR}/step_N.pt; pass the "
            f"run directory of a run that saved one{restart}."
        )
    problems = []
    for p in files:
        try:
            found = Checkpoint(p, _read(p, mmap=mmap, verify=True))
        except Exception as exc:
            problems.append(_unreadable(p, exc))
            continue
        for problem in problems:
            log.warning("skipped a damaged checkpoint: %s; resuming from %s instead", problem, p.name)
        return found
    raise UserError(
        f"Every checkpoint in {directory} is damaged ({'; '.join(problems)}); start the run again from step 0 "
        f"with train.resume=auto hydra.run.dir={run_dir} (its rows are dropped first), or start afresh in "
        "another hydra.run.dir without train.resume."
    )


def model_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, saved value, current value) for every `model.*` key whose value differs."""
    a, b = flatten(saved, "model."), flatten(current, "model.")
    missing = object()
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in ("model._target_", "model._convert_"):
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            diffs.append((key, None if va is missing else va, None if vb is missing else vb))
    return diffs


def root_causes(diffs: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """The differences a user typed first: a group choice (norm, placement, depth) before the keys it sets —
    and a different norm without its own knobs (bias, eps), which change with it."""
    norm_changed = any(k == "model.norm.name" for k, _, _ in diffs)
    kept = [
        d
        for d in diffs
        if not (norm_changed and d[0].startswith("model.norm.") and d[0] != "model.norm.name")
    ]
    return sorted(kept, key=lambda d: d[0] not in KEY_NAMES)


def built_norm(model_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The model config with its norm's settings as the norm is built from them (norms.built_settings)."""
    norm = model_config.get("norm")
    if not isinstance(norm, Mapping):
        return model_config
    return {**model_config, "norm": built_settings(norm)}


def check_compatible(ckpt: Checkpoint, model_config: Mapping[str, Any]) -> None:
    """InvalidConfig naming every differing model key when `ckpt` was trained with another model config."""
    saved = ckpt.state.get(MODEL_CONFIG_KEY)
    if saved is None:
        return  # older checkpoints: load_model_state then reports the tensors that do not fit
    if isinstance(saved.get("placement"), str):  # saved before the model took the whole placement group
        saved = {**saved, "placement": {"name": saved["placement"]}}
    diffs = root_causes(model_differences(built_norm(saved), built_norm(model_config)))
    if not diffs:
        return
    from normlab.config.check import shown

    parts = [f"{KEY_NAMES.get(k, k)}={shown(old)} there, {shown(new)} here" for k, old, new in diffs]
    first_key, first_old, _ = diffs[0]
    raise InvalidConfig(
        f"The checkpoint {ckpt.path} was trained with a different model ({'; '.join(parts)}); resume with its "
        f"settings (e.g. {KEY_NAMES.get(first_key, first_key)}={shown(first_old)}) or start afresh without "
        "train.resume.",
        KEY_NAMES.get(first_key, first_key),
    )


def load_model_state(model: torch.nn.Module, ckpt: Checkpoint) -> None:
    """model.load_state_dict, with a mismatch (older checkpoints without a model config) as one sentence."""
    try:
        model.load_state_dict(ckpt.state["model"])
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()]
        example = lines[0][:160] if lines else str(exc)[:160]
        raise InvalidConfig(
            f"The checkpoint {ckpt.path} does not fit this model ({example}); resume with the model settings it "
            "was trained with or start afresh without train.resume.",
            "train.resume",
        ) from None
