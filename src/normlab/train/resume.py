"""A resume continues the same experiment with every step accounted for, or refuses in one sentence.

`decide(cfg, run_dir)` turns `train.resume` into what a run does — skip (train.resume=auto on a finished
run), start, or continue a checkpoint — and checks that the checkpoint belongs to this experiment:

- the model (`checkpoint.check_compatible`: depth, norm, placement, `model.*`);
- every other setting that changes what the run computes (`experiment_settings`: seed, `optim.*`, the
  schedule and warm-up, `data.*`, batch and window, precision, gradient clipping, the spike and divergence
  rules, …) against the record the checkpoint keeps (`EXPERIMENT_KEY`); only the settings in `FREE` may
  change (train further with a larger `train.max_steps`, another device, logger or checkpoint interval);
- the corpus (`check_corpus`, once it is built): the SHA-256 of its tokenizer and token files, so that token
  ids never change meaning mid-run even where the settings look alike;
- the rows (`check_rows`): resuming a run in its own directory, metrics.jsonl must hold a row for every
  step the checkpoint has trained, or the resume would leave a hole for good (`train.resume=auto` picks a
  checkpoint the rows cover instead: normlab.train.run_dir.plan).

A deliberate change is allowed only when named in `train.resume_allow` (a setting, a group such as `data`,
or `missing_rows`); the run then records it in summary.json (`resume_changes`, `missing_steps`) and marks
the first row it logs (`resume/changed`, `resume/gap`). A refusal of a resume in the run's own directory
leaves that directory as it was: the command line asks `decide` before Hydra writes anything there
(normlab.cli.RunDirGuard), and a run refused later (the corpus, known once built) puts its summary back.

A start decides once: `admit` keeps the decision it made with the directory's claim, and the run takes it
(`decision_for`), loading only the decided checkpoint's tensors; a run no callback admitted (a stack's
member, a Run built in code) decides itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging.handlers import BufferingHandler
from pathlib import Path
from typing import Any

from normlab.config.groups import MISSING_ROWS
from normlab.config.keys import flatten
from normlab.errors import InvalidConfig, UserError
from normlab.summary import SUMMARY_FILE
from normlab.train import checkpoint
from normlab.train.checkpoint import CHECKPOINT_DIR, EXPERIMENT_KEY, Checkpoint
from normlab.train.logged_rows import (
    describe_steps,
    missing_steps,
    rows_cover,
    training_losses,
    training_steps,
)
from normlab.train.run_dir import (
    AUTO,
    RESUME,
    SKIP,
    START,
    claim_run_dir,
    claimed,
    continues,
    holds_results,
    plan,
    unclaim,
)

log = logging.getLogger("normlab")

# Settings a resume may change without changing the experiment: how long and where it trains, what it logs
# and how often it saves. `train.max_steps` moves the end of the decay schedules with it (train on).
FREE = (
    "train.max_steps",
    "train.resume",
    "train.resume_allow",
    "train.device",
    "train.num_threads",
    "train.compile",
    "train.progress",
    "train.flush_every",
    "train.ckpt_every",
    "train.eval_every",
    "train.eval_at_start",
    "train.eval_at",
    "train.sample_tokens",
    "train.sample_prompt",
    "train.peak_flops",
    "data.cache_dir",  # where the token cache is: the corpus itself is checked by its files' hashes
    "data.path",
    "data.tokenizer_path",
    "logger",
    "metrics",
    "name",
    "experiment_name",
)
# The model's settings: compared by checkpoint.check_compatible, with its own sentence.
MODEL_GROUPS = ("model", "norm", "placement", "depth")
CORPUS = "data"  # train.resume_allow=[data] also allows another corpus


class ResumeRefused(InvalidConfig):
    """The checkpoint belongs to another experiment (status invalid): one sentence naming what differs."""


class RowsMissing(UserError):
    """metrics.jsonl lacks rows the checkpoint has trained (status failed): the steps, and how to go on."""


class LeftAsItWas(UserError):
    """A resume of the run in its own directory, refused (any of the errors above, or a missing checkpoint):
    the directory is left as it was — its summary.json put back — and the sentence is the refusal's."""

    def __init__(self, refusal: UserError) -> None:
        super().__init__(str(refusal))
        self.status = refusal.status


def previous_summary(run_dir: Path, resume: str | None) -> dict[str, Any] | None:
    """summary.json of the run that train.resume continues in `run_dir` (auto, or a path inside it), as it
    is before this run writes anything; None for a fresh run or a run continued from elsewhere."""
    if not resume or not continues(run_dir, resume) or not holds_results(run_dir):
        return None
    return _summary(run_dir) or {}


def _covers(prefix: str, key: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def experiment_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The checked config's settings that a resume must keep, flat (`optim.lr`: 0.003)."""
    return {
        key: list(value) if isinstance(value, tuple) else value  # as a checkpoint's record holds it
        for key, value in flatten(cfg).items()
        if not any(_covers(p, key) for p in (*FREE, *MODEL_GROUPS))
    }


def corpus_identity(cache_entry: Path) -> dict[str, str] | None:
    """The SHA-256 of a token-cache entry's tokenizer and token files (from its meta.json), or None."""
    try:
        files = json.loads((cache_entry / "meta.json").read_text())["files"]
        return {name: str(record["sha256"]) for name, record in sorted(files.items())}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def experiment_record(cfg: Mapping[str, Any], cache_entry: Path | None) -> dict[str, Any]:
    """What a checkpoint keeps of its experiment (plain values only: it loads with weights_only)."""
    return {
        "settings": experiment_settings(cfg),
        "corpus": corpus_identity(cache_entry) if cache_entry is not None else None,
    }


@dataclass(frozen=True)
class Change:
    """A setting a resume changed on purpose (train.resume_allow), at the step it continued from."""

    key: str
    was: Any
    now: Any

    def record(self, step: int) -> dict[str, Any]:
        return {"step": step, "key": self.key, "was": self.was, "now": self.now}


def allowed_by(key: str, allow: Iterable[str]) -> bool:
    return any(_covers(a, key) for a in allow)


def _shown_key(key: str) -> str:
    return key.removesuffix(".name") if key.count(".") == 1 and key.endswith(".name") else key


def _shown(value: Any) -> str:
    from normlab.config.check import shown

    return shown(value)


def _allow_hint(keys: list[str]) -> str:
    return f"'train.resume_allow=[{','.join(dict.fromkeys(keys))}]'"


def check_settings(ckpt: Checkpoint, cfg: Mapping[str, Any], allow: Iterable[str]) -> list[Change]:
    """The settings that differ from the checkpoint's experiment and that `allow` names; ResumeRefused
    naming the others. A checkpoint saved before the record existed is said once and not checked."""
    record = ckpt.state.get(EXPERIMENT_KEY)
    if not isinstance(record, Mapping) or not isinstance(record.get("settings"), Mapping):
        log.warning(
            "%s was saved before normlab recorded a run's experiment: its seed, optimizer and corpus cannot be "
            "checked against this run's",
            ckpt.path,
        )
        return []
    saved, now = dict(record["settings"]), experiment_settings(cfg)
    # a setting one side does not know (added or removed by another normlab version) cannot be compared
    changes = [
        Change(key, saved[key], now[key])
        for key in sorted(set(saved) & set(now))
        if not any(_covers(p, key) for p in (*FREE, *MODEL_GROUPS)) and saved[key] != now[key]
    ]
    allow = list(allow)
    refused = [c for c in changes if not allowed_by(c.key, allow)]
    if refused:
        parts = "; ".join(f"{_shown_key(c.key)}={_shown(c.was)} there, {_shown(c.now)} here" for c in refused)
        first = refused[0]
        raise ResumeRefused(
            f"The checkpoint {ckpt.path} was trained in another experiment ({parts}); a resume continues the "
            f"same experiment, so resume with its settings (e.g. {_shown_key(first.key)}={_shown(first.was)}), "
            "start afresh without train.resume, or change them on purpose with "
            f"{_allow_hint([c.key for c in refused])} (recorded in summary.json and marked in metrics.jsonl).",
            _shown_key(first.key),
        )
    return changes


def check_corpus(
    ckpt_record: Mapping[str, Any] | None, ckpt_path: Path, cache_entry: Path, allow: Iterable[str]
) -> list[Change]:
    """Whether the corpus is the one the checkpoint was trained on (its files' hashes); a different one is
    a Change when `allow` names `data`, ResumeRefused otherwise."""
    saved = (ckpt_record or {}).get("corpus") if isinstance(ckpt_record, Mapping) else None
    now = corpus_identity(cache_entry)
    if not saved or now is None or dict(saved) == now:
        return []
    differ = sorted(name for name in set(saved) | set(now) if saved.get(name) != now.get(name))
    change = Change("corpus", {n: saved.get(n) for n in differ}, {n: now.get(n) for n in differ})
    if allowed_by(CORPUS, allow):
        return [change]
    raise ResumeRefused(
        f"The checkpoint {ckpt_path} was trained on another corpus (here {', '.join(differ)} differ from the "
        f"files it was trained on, in {cache_entry}), so its token ids would mean other text; resume with the "
        "data it was trained on, start afresh without train.resume, or continue on this corpus on purpose "
        "with 'train.resume_allow=[data]' (recorded in summary.json and marked in metrics.jsonl).",
        "data",
    )


def check_rows(run_dir: Path, ckpt: Checkpoint, allow: Iterable[str]) -> list[tuple[int, int]]:
    """The steps before the checkpoint's that metrics.jsonl in `run_dir` (the checkpoint's own run) has no
    row for, when `allow` names missing_rows; RowsMissing saying which, and how to go on, otherwise."""
    steps = training_steps(run_dir)
    gaps = missing_steps(steps, ckpt.step)
    if not gaps or allowed_by(MISSING_ROWS, allow):
        return gaps
    older = checkpoint.newest(run_dir / CHECKPOINT_DIR, at_most=rows_cover(steps))
    if older is not None:
        path, step = older
        remedy = (
            f"resume from {CHECKPOINT_DIR}/{path.name} instead (train.resume={path}, or train.resume=auto, "
            f"which picks it: steps {step}–{ckpt.step - 1} are trained again)"
        )
    else:
        remedy = "start it again from step 0 with train.resume=auto (its rows are dropped first)"
    raise RowsMissing(
        f"metrics.jsonl in {run_dir} has no rows for steps {describe_steps(gaps)}, which {ckpt.path.name} "
        f"(step {ckpt.step}) has trained: resuming from it would leave them missing for good; {remedy}, or "
        f"keep the hole on purpose with 'train.resume_allow=[{MISSING_ROWS}]' (recorded in summary.json)."
    )


def in_place(run_dir: Path, ckpt_path: Path) -> bool:
    """Whether the checkpoint lies inside `run_dir` (the run continues in its own directory; a retired one
    in checkpoints/retired/ included: it must then follow the rows there too)."""
    with contextlib.suppress(OSError):
        return run_dir.resolve() in ckpt_path.resolve().parents
    return False


def check_history(run_dir: Path, ckpt: Checkpoint) -> None:
    """UserError (failed) when the checkpoint, one of `run_dir`'s own, was saved in another history than
    the one metrics.jsonl holds (a rewind abandoned it): continuing it would splice two histories."""
    losses = training_losses(run_dir)
    if checkpoint.same_history(ckpt.state, losses):
        return
    record = ckpt.state[checkpoint.LAST_ROW_KEY]
    step = int(record["step"])
    raise UserError(
        f"The checkpoint {ckpt.path} belongs to another history of the run in {run_dir}: it was saved after a "
        f"loss of {record['loss']} at step {step}, and metrics.jsonl's row for that step has {losses[step]}, "
        "so resuming from it would splice two histories into one run; continue the run with train.resume=auto "
        "(which picks a checkpoint of the history metrics.jsonl holds), or resume from this checkpoint in a "
        "new hydra.run.dir."
    )


@dataclass
class Decision:
    """What a run does with train.resume: skip (auto, finished), start (restart: drop the rows there), or
    continue `checkpoint`, with the changes and the hole it was allowed to continue across."""

    skip: bool = False
    checkpoint: Checkpoint | None = None
    restart: bool = False
    in_place: bool = False
    changes: list[Change] = field(default_factory=list)
    missing: list[tuple[int, int]] = field(default_factory=list)
    previous: dict[str, Any] | None = None  # the run's summary.json before this resume, when continuing it
    # what deciding said, held when decided before the run's log was set up (`admit`): the run says it
    held: list[logging.LogRecord] = field(default_factory=list)
    loaded: bool = True  # False: `checkpoint` was opened memory-mapped, to check it; the run loads it


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def decide(
    cfg: Mapping[str, Any],
    run_dir: Path,
    *,
    say: Callable[[str], None] = log.info,
    mmap: bool = False,
    check_lock: bool = False,
) -> Decision:
    """What train.resume (in the checked config `cfg`) makes a run in `run_dir` do, every check made; raises
    ResumeRefused, RowsMissing or UserError (a missing or damaged checkpoint) in one sentence. `mmap`: open
    the checkpoint without reading its tensors (a check before the run)."""
    train = cfg["train"]
    resume, allow = train.get("resume"), list(train.get("resume_allow") or [])
    if not resume:
        return Decision()
    target: str | None = resume
    decision = Decision(previous=previous_summary(run_dir, resume))
    if resume == AUTO:
        found = plan(run_dir, train["max_steps"], check_lock=check_lock)
        say(f"train.resume=auto: {run_dir}: {found.sentence}")
        if found.action == SKIP:
            decision.skip = True
            newest = checkpoint.newest(run_dir / CHECKPOINT_DIR)
            if newest is not None:  # a finished run of another experiment is not this one's either
                ckpt = checkpoint.find_checkpoint(newest[0], mmap=True)
                checkpoint.check_compatible(ckpt, cfg["model"])
                check_settings(ckpt, cfg, allow)
            return decision
        decision.restart = found.action == START
        target = str(found.checkpoint) if found.action == RESUME else None
    if target is None:
        return decision
    ckpt = checkpoint.find_checkpoint(target, mmap=mmap)
    checkpoint.check_compatible(ckpt, cfg["model"])
    decision.changes = check_settings(ckpt, cfg, allow)
    decision.in_place = in_place(run_dir, ckpt.path)
    if decision.in_place:
        check_history(run_dir, ckpt)
        decision.missing = check_rows(run_dir, ckpt, allow)
    decision.checkpoint = ckpt
    return decision


@contextlib.contextmanager
def _held() -> Any:
    """The normlab log's records kept (yielded list) rather than said, while in the block."""
    normlab_log, holding = logging.getLogger("normlab"), BufferingHandler(sys.maxsize)
    level, propagate = normlab_log.level, normlab_log.propagate
    normlab_log.addHandler(holding)
    normlab_log.setLevel(logging.INFO)
    normlab_log.propagate = False
    try:
        yield holding.buffer
    finally:
        normlab_log.removeHandler(holding)
        normlab_log.setLevel(level)
        normlab_log.propagate = propagate


def check_before_writing(config: Any, run_dir: Path) -> Decision:
    """For a start that continues the run in `run_dir` (train.resume=auto or a path inside it): every check
    of `decide`, and the corpus against the checkpoint's (its token cache opened, or built as the run would
    build it), made on Hydra's composed `config` before anything is written there, so that a refused resume
    leaves the run — its summary.json, its .hydra/, its train.log — as it was. Returns the decision (a skip:
    the caller keeps Hydra from writing too). Raises as `decide` does (and InvalidConfig for a bad value: a
    run that is there is not relabelled by a command that cannot run). What deciding says the run says."""
    from omegaconf import OmegaConf

    from normlab.config import checked

    task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]) if "hydra" in config else config
    with _held():  # what the check warns about, the run says in a moment (it checks its config itself)
        cfg = checked(task)
    with _held() as said:
        decision = decide(cfg, run_dir, mmap=True)
    decision.held = said
    decision.loaded = decision.checkpoint is None
    if decision.checkpoint is not None:
        with _held():  # the corpus opened or built: the run says what it does with it
            _check_corpus_now(cfg, decision.checkpoint)
    return decision


def _check_corpus_now(cfg: Mapping[str, Any], ckpt: Checkpoint) -> None:
    """The corpus check the run makes once its corpus is built (`check_corpus`), made now: the corpus is
    opened from its token cache (built into the cache, where it is not there yet, as the run would)."""
    from normlab.train.build import run_corpus

    corpus = run_corpus(cfg, progress=False)
    check_corpus(
        ckpt.state.get(EXPERIMENT_KEY),
        ckpt.path,
        corpus.cache_dir,
        list(cfg["train"].get("resume_allow") or []),
    )


def admit(directory: Path, resume: str | None, config: Any) -> Decision | None:
    """Claim `directory` for a run (normlab.train.run_dir.claim_run_dir) before anything is written there;
    one that continues the run already there is checked in full first (`check_before_writing`: its decision
    is returned, None for a run that continues nothing there), and a refusal lets go of the claim. For every
    launcher that writes run directories: the command line's RunDirGuard calls it for `python train.py`."""
    claim = claim_run_dir(directory, resume)
    try:
        if resume and holds_results(directory) and continues(directory, resume):
            claim.decision = check_before_writing(config, directory)
            return claim.decision
    except BaseException:
        unclaim(directory)
        raise
    return None


def decision_for(cfg: Mapping[str, Any], run_dir: Path) -> Decision:
    """What train.resume makes the run in `run_dir` do: the decision `admit` made when it claimed the
    directory (taken: a run acts on it once), its checkpoint's tensors loaded now; else decided here
    (`decide`), for a run no callback admitted."""
    claim = claimed(run_dir)
    handed = claim.decision if claim is not None else None
    if claim is not None:
        claim.decision = None
    if not isinstance(handed, Decision):
        return decide(cfg, run_dir)
    for record in handed.held:  # what deciding said, said now that the run's log is set up
        if log.isEnabledFor(record.levelno):
            log.handle(record)
    if handed.checkpoint is not None and not handed.loaded:
        handed.checkpoint = checkpoint.find_checkpoint(handed.checkpoint.path)
        handed.loaded = True
    return handed
