"""What train.py does inside a Hydra job: pick threads, run, turn user errors into one sentence."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from normlab.errors import UserError
from normlab.train.run import Run

log = logging.getLogger("normlab")


def threads_for_job(requested: int | None) -> int | None:
    """One torch thread per job under a parallel launcher (joblib): n_jobs processes then share the cores."""
    if requested:
        return int(requested)
    hydra_cfg = HydraConfig.get()
    parallel = (
        hydra_cfg.mode == RunMode.MULTIRUN and hydra_cfg.runtime.choices.get("hydra/launcher") == "joblib"
    )
    return 1 if parallel else None


def sweep_group() -> str | None:
    """The W&B group of a multirun job: the sweep directory's date and name, shared by all its jobs."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    sweep = Path(hydra_cfg.sweep.dir)
    return f"{sweep.parent.name}_{sweep.name}" if sweep.parent.name else sweep.name


def run_hydra_job(cfg: DictConfig) -> float | None:
    """Run one job; returns the final validation loss (for Hydra sweepers), None if it has none."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        summary = Run(
            cfg, run_dir, num_threads=threads_for_job(cfg.train.num_threads), group=sweep_group()
        ).execute()
    except UserError as e:
        # one sentence on stderr; summary.json keeps it as `reason` (a console log line would repeat it)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"interrupted: summary and checkpoint are in {run_dir}", file=sys.stderr)
        sys.exit(130)
    log.info(
        "%s: %s after %d steps, final val loss %s (%s)",
        cfg.name,
        summary["status"],
        summary["steps"],
        summary["final_val_loss"],
        run_dir,
    )
    return summary["final_val_loss"]
