"""Weights & Biases as a second sink next to metrics.jsonl (`logger=wandb`).

metrics.jsonl stays the source of truth: nothing here may stop training. Starting falls back from online
to offline to nothing, each failure reported in one line; a failed `log` disables the sink for the rest
of the run. W&B's files go to RUN_DIR/wandb/, so an offline run can be browsed with `wandb leet` and
uploaded later.

The W&B run starts with the first metrics row, so a run that never trained (missing data, a crash while
building the model) leaves no empty W&B run behind. Its id is kept in the run directory (RUN_ID_FILE): a
resumed run logs on under the same id (`wandb.init(id=…, resume="allow")`) instead of starting a second
W&B run; a run started afresh in its directory gets a new id. Online, the server continues that run;
offline, each process writes a fragment of its own, and the line an offline run prints names the one
command that uploads them all, in order: `wandb beta sync --id ID`, as W&B documents it for resumed
fragments (normlab.metrics.wandb_sync). Checked without a server: that command, its fragments and their
steps (`--dry-run` lists them all); not checked: the upload itself and how W&B's UI joins the history.

Each training run is one W&B run: `group` = the sweep, `job_type` = the variant (what the sweep varies,
seed excluded, e.g. `ln, pre`), the config flattened to the override keys, and the per-layer metrics
(`grad_norm/layer_i`, `act_rms/layer_i`, ...) in panel sections of their own (W&B makes a section of the
name before the first "/").
"""

from __future__ import annotations

import logging
import netrc
import os
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional
from urllib.parse import urlparse

from normlab.io import write_text_atomic
from normlab.knobs import Knobs, knob
from normlab.metrics import names
from normlab.metrics.histograms import Histogram
from normlab.metrics.sinks import RowSink
from normlab.metrics.wandb_sync import fragments, sync_command
from normlab.summary import OUTCOME_FIELDS

log = logging.getLogger("normlab")

MODES = ("auto", "online", "offline", "disabled")
RUN_ID_FILE = Path("wandb") / "normlab-run-id"  # in the run directory: the W&B run this training run logs to
# config groups whose choice is named by their `name` key: logged as `norm: ln` so W&B can group by it
NAMED_GROUPS = ("norm", "placement", "schedule", "data", "logger")


@dataclass(frozen=True)
class LoggerConfig(Knobs):
    """no external logger: metrics.jsonl and summary.json in the run directory only"""

    GROUP: ClassVar[str] = "logger"
    name: str = knob("none", "the logger (logger=NAME)", choices=lambda: tuple(LOGGERS))


@dataclass(frozen=True)
class WandbConfig(LoggerConfig):
    """Weights & Biases, on top of metrics.jsonl (which stays the source of truth; a W&B failure never stops
    training). Files go to RUN_DIR/wandb/. Without credentials the run is logged offline, and it prints the
    command that uploads it later."""

    name: str = knob("wandb", "the logger (logger=NAME)", choices=lambda: tuple(LOGGERS))
    project: str = knob("normlab", "W&B project")
    entity: Optional[str] = knob(None, "W&B entity (null = your default entity)")  # noqa: UP045 (OmegaConf)
    mode: str = knob(
        "auto",
        "auto (online with credentials, offline without) | online | offline | disabled; WANDB_MODE overrides",
        choices=MODES,
    )
    job_type: Optional[str] = knob(  # noqa: UP045
        None,
        "W&B job type; null = the variant: what the sweep varies except the seed (`ln, pre`), or norm, placement, "
        "depth and warmup for a single run, so the W&B runs table groups a variant's seeds by job type",
    )
    tags: list[str] = knob(
        [], "extra W&B tags (norm, placement, depth, warmup and experiment are always tagged)"
    )
    init_timeout: float = knob(
        30, "seconds wandb.init may wait (for the network) before falling back to offline", gt=0
    )
    system_stats: bool = knob(
        False, "sample CPU/GPU/memory usage into the run (costs a little CPU on small machines)"
    )
    finish_timeout: float = knob(
        120,
        "seconds wandb.finish may spend uploading at the end of an online run (the rest stays for `wandb sync`)",
        ge=0,
    )


LOGGERS: dict[str, type[LoggerConfig]] = {"none": LoggerConfig, "wandb": WandbConfig}


def has_credentials(base_url: str, env: Mapping[str, str] = os.environ) -> bool:
    """Whether W&B could authenticate without asking: an API key in the environment, or in the netrc
    file (where `wandb login` stores it) for the server at base_url.

    Checked locally (no network): an online attempt without credentials would prompt or fail.
    """
    if env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(base_url).hostname or ""
    path = Path(env.get("NETRC", Path.home() / ".netrc")).expanduser()
    try:
        return path.is_file() and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(requested: str, base_url: str, env: Mapping[str, str] = os.environ) -> str:
    """online | offline | disabled: WANDB_MODE wins, then logger.mode; auto means online with credentials."""
    mode = env.get("WANDB_MODE") or requested
    if mode in ("dryrun",):  # W&B's old name for offline
        mode = "offline"
    if mode not in MODES:
        raise ValueError(f"logger.mode={mode} is unknown; choose one of {', '.join(MODES)}.")
    if mode == "auto":
        return "online" if has_credentials(base_url, env) else "offline"
    return mode


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"d_model": 128}} → {"model.d_model": 128}: the keys users type as Hydra overrides."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = list(value) if isinstance(value, list | tuple) else value
    return flat


def run_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config, flattened; a named group's choice sits at its top-level key (`norm: rms`)."""
    flat = flatten(cfg)
    for group in NAMED_GROUPS:
        if isinstance(cfg.get(group), Mapping) and "name" in cfg[group]:
            flat[group] = flat.pop(f"{group}.name")
    return flat


def run_tags(cfg: Mapping[str, Any]) -> list[str]:
    tags = [
        cfg["norm"]["name"],
        cfg["placement"]["name"],
        f"L{cfg['depth']}",
        f"w{cfg['warmup_steps']}",
        *cfg["logger"].get("tags", []),  # logger=none has no tags
    ]
    experiment = cfg.get("experiment_name", cfg.get("experiment"))
    if isinstance(experiment, str):
        tags.append(experiment)
    return list(dict.fromkeys(str(t)[:64] for t in tags))  # W&B limits a tag to 64 characters


def define_metrics(run: Any) -> None:
    """Every chart against the training step; val_loss summarised by its minimum. Per-layer metrics need
    no definition of their own: W&B puts `grad_norm/layer_0`, `act_rms/layer_0`, ... in one panel section
    per family (named by what precedes the first "/"), apart from the global charts."""
    run.define_metric(names.STEP)
    run.define_metric("*", step_metric=names.STEP)  # every chart's x axis is the training step
    run.define_metric(names.VAL_LOSS, step_metric=names.STEP, summary="min")


def swept_keys(multirun_file: Path | None = None) -> list[str]:
    """Config keys a Hydra sweep varies (`norm`, `optim.lr`, ...), read from the sweep's multirun.yaml:
    command-line overrides with several values and the sweeper's `params`. Empty outside a multirun."""
    from omegaconf import OmegaConf

    if multirun_file is None:
        try:
            from hydra.core.hydra_config import HydraConfig
            from hydra.types import RunMode

            if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
                return []
            multirun_file = Path(HydraConfig.get().sweep.dir) / "multirun.yaml"
        except Exception:
            return []
    try:
        hydra_cfg = OmegaConf.load(multirun_file).hydra
        task = list(hydra_cfg.overrides.task)
        params_node = hydra_cfg.sweeper.get("params")
        params = OmegaConf.to_container(params_node, resolve=False) if params_node else {}
    except Exception:
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    keys = []
    for text in task + [f"{k}={v}" for k, v in params.items()]:
        try:
            override = parser.parse_override(text)
        except Exception:
            continue
        if override.is_sweep_override():
            keys.append(override.get_key_element().lstrip("+~"))
    return list(dict.fromkeys(keys))


DEFAULT_VARIANT_KEYS = ("norm", "placement", "depth", "warmup_steps")
JOB_TYPE_MAX = 64  # W&B's limit on job_type


def hydra_choices() -> dict[str, str]:
    """The chosen option of every config group of the running Hydra job ({} outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    except Exception:
        return {}


def variant_name(
    cfg: Mapping[str, Any], keys: list[str] | tuple[str, ...] = (), choices: Mapping[str, str] | None = None
) -> str:
    """The W&B job_type of a run: its values of the swept keys except the seed, as compare.py labels
    variants (`ln, pre`, `ln, post, lr=0.001`); for a single run (or a seed-only sweep) norm, placement,
    depth and warmup. Groups and presets name a group key; their option comes from its `name` field."""
    keys = [k for k in keys if k != "seed" and not k.startswith("hydra")] or list(DEFAULT_VARIANT_KEYS)
    parts = []
    for key in keys:
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping):  # a config group: its option (`name` field, or Hydra's choice)
            node = node.get("name", None) or (choices or {}).get(key)
            if node is None:
                continue
        short = key.split(".")[-1]
        parts.append(str(node) if key in ("norm", "placement") else f"{short}={node}")
    name = ", ".join(parts) or "train"
    return name if len(name) <= JOB_TYPE_MAX else name[: JOB_TYPE_MAX - 1] + "…"


def to_wandb(row: Mapping[str, Any], wandb: Any) -> dict[str, Any]:
    """A metrics row as W&B takes it: histograms become wandb.Histogram, everything else stays."""
    return {
        k: wandb.Histogram(np_histogram=(v.counts, v.edges)) if isinstance(v, Histogram) else v
        for k, v in row.items()
    }


def new_run_id() -> str:
    """A W&B run id as W&B makes them: 8 characters of [a-z0-9]."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def run_id(run_dir: Path, fresh: bool, new_id: Callable[[], str] = new_run_id) -> str:
    """The W&B run id of the training run in `run_dir`: the one kept there (a resumed run), or — for a
    fresh start, or where none is kept — `new_id()`, written there first (atomically, beside W&B's files)."""
    path = Path(run_dir) / RUN_ID_FILE
    if not fresh:
        try:
            kept = path.read_text().strip()
        except OSError:
            kept = ""
        if kept:
            return kept
    made = new_id()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, made + "\n")
    return made


def announce(
    run: Any,
    credentials: bool,
    run_dir: Path | None = None,
    project: str = "normlab",
    entity: str | None = None,
) -> None:
    """The one line a user needs: where an online run is, or how to browse an offline one and the one
    command that uploads all of it (every fragment its resumes wrote in `run_dir`)."""
    settings = getattr(run, "settings", None)
    if getattr(settings, "mode", None) == "offline":
        why = "" if credentials else " (no W&B credentials found)"
        where = getattr(settings, "sync_dir", None) or "RUN_DIR/wandb/offline-run-*"
        rid = getattr(run, "id", None)
        parts = fragments(run_dir, rid) if run_dir is not None and rid else []
        if len(parts) > 1:
            upload = (
                f"upload all {len(parts)} parts of this run (one per start: the first and each resume), in "
                f"order, as one W&B run with: {sync_command(parts, rid, project, entity)}"
            )
        else:
            upload = f"upload later with: wandb sync {where}"
        log.info("W&B offline%s; browse it with: wandb leet %s; %s", why, where, upload)
    else:
        log.info("W&B run: %s", getattr(run, "url", None))


class WandbSink(RowSink):
    """One W&B run: `log(row)` per metrics row (as a training-loop callback, RowSink), `finish(summary)` once,
    however the run ended.

    `start`, when given, opens the W&B run at the first `log` (and returns it, or None when W&B cannot
    start); `run` is then None until that first row."""

    def __init__(self, run: Any, wandb: Any, start: Callable[[], Any] | None = None) -> None:
        self.run, self.wandb, self._start = run, wandb, start

    @classmethod
    def open(
        cls,
        cfg: Mapping[str, Any],
        run_dir: Path,
        group: str,
        fresh: bool = False,
        concurrent: bool = False,
    ) -> WandbSink | None:
        """A sink that starts the W&B run (online, else offline) with the first metrics row, or None with
        one line saying why W&B is off. The mode is decided now, so a bad `logger.mode` is reported first.
        The W&B run is the one whose id `run_dir` keeps (a resume), a new one when `fresh` or none is kept.
        `concurrent`: other W&B runs of this process stay open beside it (the members of a stack)."""
        lcfg = WandbConfig.of(cfg["logger"])
        try:
            import wandb
        except ImportError as e:  # a dependency, but one whose own imports (protobuf, ...) can break
            log.warning(
                "W&B off: wandb could not be imported (%s); metrics.jsonl only — reinstall it with "
                "pip install --force-reinstall wandb.",
                e,
            )
            return None
        try:
            base_url = wandb.Settings().base_url  # the server W&B would use (WANDB_BASE_URL or its default)
            mode = resolve_mode(lcfg.mode, base_url)
        except Exception as e:
            log.warning("W&B off: %s", e)
            return None
        if mode == "disabled":
            return None
        job_type = lcfg.job_type or variant_name(cfg, swept_keys(), hydra_choices())

        def start() -> Any:
            run = None
            try:
                rid = run_id(run_dir, fresh, new_run_id)
            except OSError as e:  # an unwritable directory: a W&B run of its own, as before ids were kept
                log.warning("W&B run id not kept in %s (%s); a resume will start a new W&B run", run_dir, e)
                rid = None
            for attempt in ("online", "offline") if mode == "online" else ("offline",):
                try:
                    run = cls._init(wandb, cfg, run_dir, group, attempt, job_type, rid, concurrent)
                    break
                except Exception as e:  # any W&B failure must leave training running
                    first_line = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
                    log.warning("W&B %s start failed (%s: %s)", attempt, type(e).__name__, first_line)
            if run is None:
                log.warning("W&B off for this run; metrics.jsonl has everything.")
                return None
            announce(run, has_credentials(base_url), run_dir, lcfg.project, lcfg.entity)
            return run

        return cls(None, wandb, start)

    @staticmethod
    def _init(
        wandb: Any,
        cfg: Mapping[str, Any],
        run_dir: Path,
        group: str,
        mode: str,
        job_type: str = "train",
        run_id: str | None = None,
        concurrent: bool = False,
    ) -> Any:
        lcfg = WandbConfig.of(cfg["logger"])
        settings = wandb.Settings(
            mode=mode,
            init_timeout=float(lcfg.init_timeout),
            finish_timeout=float(lcfg.finish_timeout),
            x_disable_stats=not lcfg.system_stats,
            console="off",  # leave stdout/stderr (and the progress bar) alone
            silent=True,  # we print the one line that matters ourselves
            # jobs of a multirun in one process each get their own run; a stack's members run side by side
            reinit="create_new" if concurrent else "finish_previous",
        )
        run = wandb.init(
            id=run_id,
            resume="allow" if run_id else None,  # the same W&B run when the training run is resumed
            project=lcfg.project,
            entity=lcfg.entity,
            name=cfg["name"],
            group=group,
            job_type=job_type,
            tags=run_tags(cfg),
            config=run_config(cfg),
            dir=str(run_dir),
            settings=settings,
        )
        define_metrics(run)
        return run

    def log(self, row: Mapping[str, Any]) -> None:
        if self.run is None and self._start is not None:
            start, self._start = self._start, None
            self.run = start()
        if self.run is None:
            return
        try:
            self.run.log(to_wandb(row, self.wandb))
        except Exception as e:
            log.warning("W&B logging failed (%s: %s); W&B off for the rest of this run.", type(e).__name__, e)
            self._close(exit_code=1)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Copy the summary and end the run; exit code 0 only for a completed run (W&B shows others failed).
        A run that logged no row never started a W&B run, and finishing it does nothing."""
        self._start = None
        if self.run is None:
            return
        try:
            for key in OUTCOME_FIELDS:
                if summary.get(key) is not None and not isinstance(summary[key], list):
                    self.run.summary[key] = summary[key]
        except Exception as e:
            log.warning("W&B summary failed (%s: %s)", type(e).__name__, e)
        self._close(exit_code=0 if summary.get("status") == "completed" else 1)

    def _close(self, exit_code: int) -> None:
        run, self.run = self.run, None
        try:
            run.finish(exit_code=exit_code)
        except Exception as e:
            log.warning("W&B finish failed (%s: %s)", type(e).__name__, e)
