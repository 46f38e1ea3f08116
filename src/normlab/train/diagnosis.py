"""Why a run may fail, or did: known failures of a setup, named from the run's own config and metrics.

Two moments, one set of rules (docs/runs.md, "Did it learn?"):

- `preflight(cfg)`, before training: a setup that matches a failure this project has measured says so in
  one sentence with the override that avoids it — tied small embeddings under a placement that normalises
  the residual stream (finding 10), a warm-up as long as the run, BatchNorm over a handful of sequences
  (finding 6). These are warnings: the run goes ahead (it may be the failure a user studies);
- `cause(cfg, summary, rows)`, after training: for a run that did not learn or diverged, the most likely
  cause among those its config and its metrics support — never a remedy its own numbers contradict (a run
  that never left warm-up is not told to lower its learning rate).

Pure functions over plain values (a resolved config, nested or flattened as `model.tie_embeddings`, a
summary and metrics rows), importing neither torch nor the training code, so the report (analysis) reads
old runs with the same rules as the run that writes summary.json's `diagnosis`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normlab.train.schedule import lr_at

log = logging.getLogger("normlab")

# placements whose blocks normalise the residual stream itself (Post-LN's norm_add) where the embedding enters
POST_LIKE = ("post", "mixln")
GPT2_EMBED_STD = 0.02  # model.init=gpt2: token embeddings N(0, 0.02)
BN_SMALL_BATCH = 8  # finding 6: BatchNorm 0.37 nats worse than LayerNorm at batch 4, the gap gone by 16
PLATEAU_NATS = 0.1  # "at the unigram plateau": best validation loss within this of the unigram loss
STILL_FALLING_NATS = 0.05  # the training loss fell this much over the last fifth of the run: not converged


@dataclass(frozen=True)
class Note:
    """One diagnosis: which rule (`rule`, stable for tests and tables) and its sentence."""

    rule: str
    sentence: str


def value(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """`cfg["model"]["init"]` or `cfg["model.init"]`: a nested config, or one flattened by its dots (a run
    table). A group's own value is its `name` (`norm` → `norm.name`)."""
    if key in cfg and not isinstance(cfg[key], Mapping):
        return cfg[key]
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            flat = cfg.get(f"{key}.name") if "." not in key else None
            return flat if flat is not None else default
        node = node[part]
    if isinstance(node, Mapping):
        return node.get("name", default)
    return node


def _number(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _bool(x: Any) -> bool:
    return x is True or str(x).lower() == "true"


# ------------------------------------------------------------------------------------------ the setups


def tied_small_embeddings(cfg: Mapping[str, Any]) -> bool:
    """A tied LM head on N(0, 0.02) unscaled embeddings (model.init=gpt2, model.embed_scale=1) under a
    placement that normalises the stream the embedding enters (post, deepnorm, mixln): finding 10's setup."""
    norm, placement = value(cfg, "norm"), value(cfg, "placement")
    scale = _number(value(cfg, "model.embed_scale", 1.0))
    return (
        _bool(value(cfg, "model.tie_embeddings", True))
        and value(cfg, "model.init", "gpt2") == "gpt2"
        and scale is not None
        and scale <= 1.0
        and placement in POST_LIKE
        and norm != "none"
    )


def _variant(cfg: Mapping[str, Any]) -> str:
    norm, placement = value(cfg, "norm"), value(cfg, "placement")
    return "norm=deepnorm" if norm == "deepnorm" else f"placement={placement}"


def warmup_covers_run(cfg: Mapping[str, Any]) -> bool:
    warmup, steps = _number(value(cfg, "warmup_steps", 0)), _number(value(cfg, "train.max_steps", 0))
    return bool(warmup and steps and warmup >= steps)


def last_lr(cfg: Mapping[str, Any], steps: int) -> float | None:
    """The learning rate of the last update of a run that made `steps` updates."""
    lr = _number(value(cfg, "optim.lr"))
    if lr is None or steps < 1:
        return None
    try:
        return lr_at(
            steps - 1,
            lr=lr,
            min_lr=_number(value(cfg, "optim.min_lr", 0.0)) or 0.0,
            warmup_steps=int(_number(value(cfg, "warmup_steps", 0)) or 0),
            max_steps=int(_number(value(cfg, "train.max_steps", steps)) or steps),
            schedule=str(value(cfg, "schedule", "cosine")),
        )
    except ValueError:
        return None


def batchnorm_small_batch(cfg: Mapping[str, Any]) -> bool:
    batch = _number(value(cfg, "train.batch_size"))
    return value(cfg, "norm") == "bn" and batch is not None and batch < BN_SMALL_BATCH


# ------------------------------------------------------------------------------------------ before training


def say_preflight(cfg: Mapping[str, Any]) -> list[str]:
    """The pre-flight notes of `cfg` (`preflight`), one warning line each on the console, as summary.json's
    `preflight` keeps them."""
    notes = [note.sentence for note in preflight(cfg)]
    for sentence in notes:
        log.warning("pre-flight: %s", sentence)
    return notes


def preflight(cfg: Mapping[str, Any]) -> list[Note]:
    """The known failures this setup matches, each a sentence with the override that avoids it."""
    notes = []
    if tied_small_embeddings(cfg):
        notes.append(
            Note(
                "tied_embeddings",
                f"tied N(0, 0.02) embeddings with {_variant(cfg)} can hold the run at the unigram loss while "
                "Pre-LN learns (finding 10, observed here: Post-LN and DeepNorm ended 0.014 nats above it) — to "
                "compare placements add model.tie_embeddings=false; keep them if that plateau is what you study.",
            )
        )
    if warmup_covers_run(cfg):
        warmup, steps = int(value(cfg, "warmup_steps")), int(value(cfg, "train.max_steps"))
        lr, end = _number(value(cfg, "optim.lr")), last_lr(cfg, steps)
        reached = (
            f" (its last update uses lr {end:.2g}, {end / lr:.0%} of optim.lr={lr:g})"
            if lr and end is not None
            else ""
        )
        notes.append(
            Note(
                "warmup_covers_run",
                f"warmup_steps={warmup} ≥ train.max_steps={steps}: the learning rate rises for the whole run "
                f"and never reaches its peak{reached}, so the run may end before it learns — lower "
                f"warmup_steps (e.g. warmup_steps={max(1, steps // 10)}) or raise train.max_steps.",
            )
        )
    if batchnorm_small_batch(cfg):
        batch = int(value(cfg, "train.batch_size"))
        notes.append(
            Note(
                "batchnorm_small_batch",
                f"norm=bn normalises each position over the train.batch_size={batch} sequences of a "
                f"micro-batch, so its statistics are noisy (finding 6: BatchNorm trained 0.37 nats worse than "
                f"LayerNorm at batch 4, no worse at 16) — raise train.batch_size to {2 * BN_SMALL_BATCH} or "
                "more unless that noise is what you study.",
            )
        )
    return notes


# ------------------------------------------------------------------------------------------ after training


def still_falling(losses: Sequence[float]) -> float | None:
    """How much the training loss fell over the last fifth of the run (the mean of that stretch's first
    tenth minus the mean of its last tenth), or None with too few values. `losses`: one per step, in order."""
    tail = [v for v in (_number(x) for x in losses[-max(10, len(losses) // 5) :]) if v is not None]
    if len(losses) < 20 or len(tail) < 10:
        return None
    k = max(1, len(tail) // 10)
    return sum(tail[:k]) / k - sum(tail[-k:]) / k


def cause(cfg: Mapping[str, Any], summary: Mapping[str, Any], losses: Sequence[float] = ()) -> Note | None:
    """The most likely cause of a run that diverged or did not learn, from the rules its config, its
    summary and its training losses (one per step, in order) support, in the order below; None for a run
    that learned (or whose outcome is unknown)."""
    status = summary.get("status")
    if status == "diverged":
        return _divergence(cfg, summary)
    if status != "completed" or summary.get("learned") is not False:
        return None
    steps = int(_number(summary.get("steps")) or 0)
    best, unigram = _number(summary.get("best_val_loss")), _number(summary.get("baseline_unigram_loss"))
    gap = f"best val loss {best:.3f}, unigram loss {unigram:.3f}" if best and unigram else "no unigram line"
    warmup = int(_number(value(cfg, "warmup_steps", 0)) or 0)
    if warmup and steps <= warmup:
        lr, end = _number(value(cfg, "optim.lr")), last_lr(cfg, steps)
        reached = f", its last update at lr {end:.2g} of optim.lr={lr:g}" if lr and end is not None else ""
        return Note(
            "warmup_covers_run",
            f"it never left warm-up ({steps} steps with warmup_steps={warmup}{reached}; {gap}) — lower "
            "warmup_steps or raise train.max_steps; a lower learning rate would only slow it further.",
        )
    plateau = best is not None and unigram is not None and abs(best - unigram) <= PLATEAU_NATS
    if plateau and tied_small_embeddings(cfg):
        return Note(
            "tied_embeddings",
            f"it sat at the unigram plateau ({gap}), as tied N(0, 0.02) embeddings hold {_variant(cfg)} "
            "there (finding 10, observed here) — rerun with model.tie_embeddings=false to "
            "compare the placement itself.",
        )
    if batchnorm_small_batch(cfg):
        return Note(
            "batchnorm_small_batch",
            f"norm=bn over train.batch_size={value(cfg, 'train.batch_size')} sequences per position has noisy "
            f"statistics (finding 6) ({gap}) — raise train.batch_size.",
        )
    fell = still_falling(losses)
    if fell is not None and fell > STILL_FALLING_NATS:
        return Note(
            "too_short",
            f"its training loss was still falling at the end ({fell:.2f} nats over the last fifth of its "
            f"{steps} steps; {gap}) — train longer (raise train.max_steps).",
        )
    if plateau:
        return Note(
            "plateau",
            f"it stopped at the unigram plateau ({gap}): it learned token frequencies and nothing else, and "
            "none of its settings matches a failure we know — read its loss and gradient-norm curves before "
            "changing a setting.",
        )
    return Note(
        "unknown",
        f"its loss stopped falling above the line we count as learned ({gap}) and none of its settings "
        "matches a failure we know — read its loss and gradient-norm curves before changing a setting.",
    )


def _divergence(cfg: Mapping[str, Any], summary: Mapping[str, Any]) -> Note:
    at = _number(summary.get("diverged_at"))
    step = int(at) if at is not None else None
    warmup = int(_number(value(cfg, "warmup_steps", 0)) or 0)
    lr = _number(value(cfg, "optim.lr"))
    now = f" (now {lr:g})" if lr is not None else ""
    when = f"at step {step}" if step is not None else "during training"
    lr_then = last_lr(cfg, step + 1) if step is not None else None
    at_lr = f" at lr {lr_then:.2g}" if lr_then is not None else ""
    norm, placement = value(cfg, "norm"), value(cfg, "placement")
    if norm == "none":
        return Note(
            "diverged_no_norm",
            f"it diverged {when}{at_lr} without any norm to bound the residual stream — lower optim.lr, or "
            "compare it with a norm (the no-norm control diverging is itself a result).",
        )
    if warmup == 0 and placement in POST_LIKE:
        return Note(
            "diverged_no_warmup",
            f"it diverged {when}{at_lr}: {_variant(cfg)} without warm-up (Xiong et al. 2020; finding 2) — add "
            "warmup_steps (e.g. a tenth of the run) or use placement=pre.",
        )
    if step is not None and warmup and step < warmup:
        return Note(
            "diverged_in_warmup",
            f"it diverged {when}, during warm-up{at_lr} — lower optim.lr{now} or lengthen warmup_steps.",
        )
    return Note(
        "diverged",
        f"it diverged {when}{at_lr} — lower optim.lr{now} or raise warmup_steps, and check the "
        "gradient norms before that step.",
    )
