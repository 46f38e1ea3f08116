"""The results folders of a sweep directory: a local pool's jobs (normlab.sweeps.pool) answer their parent
through files in a folder named after it (`.results-PID-START-…`), and every launcher's start
(normlab.sweeps.base) clears the folders a dead parent left (SIGKILL, power loss)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from normlab.sweeps import watchdog

RESULTS_PREFIX = ".results-"  # the folder of a sweep directory through which its jobs answer the parent


def results_folder(sweep_dir: Path) -> Path:
    """A new folder in `sweep_dir` for this process's jobs to answer through, named after this process (its
    pid and start time: `clear_dead_results` tells a dead parent's from a live one's)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{RESULTS_PREFIX}{me}-{watchdog.start_time(me)}-", dir=sweep_dir))


def clear_dead_results(sweep_dir: Path) -> list[Path]:
    """Remove the results folders of sweep parents that are gone (SIGKILL, power loss); returns them."""
    removed = []
    if not sweep_dir.is_dir():
        return removed
    for folder in sweep_dir.glob(f"{RESULTS_PREFIX}*"):
        pid, _, rest = folder.name.removeprefix(RESULTS_PREFIX).partition("-")
        started = rest.split("-", 1)[0]
        if not pid.isdigit() or watchdog.alive(int(pid), None if started == "None" else started):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
