"""A cluster job's preemption and requeueing (Hydra's submitit launcher, `hydra/launcher=slurm`).

SLURM warns a job `signal_delay_s` seconds before its time limit (or before preempting it) with the
signal submitit asked for — SIGUSR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise — and submitit's own
handler for it pickles the job (the launcher's `checkpoint`), requeues it and exits. Left alone, that
handler would fire in the middle of a training step and the requeued job would start over. normlab
therefore routes that signal to the run's StopRequest with Reaction.REQUEUE: the run stops at the next
step boundary and saves checkpoints/last.pt and summary.json (status interrupted) as for any signal, and
only then is the signal handed back to submitit, which requeues. The requeued job runs the same job in
the same run directory; `requeued_resume` finds the interrupted run there and resumes it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from normlab import distributed
from normlab.summary import SUMMARY_FILE
from normlab.train import checkpoint
from normlab.train.checkpoint import CHECKPOINT_DIR
from normlab.train.signals import DEFAULT_REACTIONS, Reaction, StopRequest

# set by submitit in every job it runs ("slurm" or "local")
EXECUTOR_ENV = "SUBMITIT_EXECUTOR"
# submitit's choice of preemption signal (its JobEnvironment reads the same variable, default USR2)
PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"


def under_submitit() -> bool:
    return bool(os.environ.get(EXECUTOR_ENV))


def submitit_preempt_signal() -> signal.Signals:
    """The signal submitit's jobs requeue on in this environment."""
    name = "SIG" + os.environ.get(PREEMPT_SIGNAL_ENV, "USR2").upper().removeprefix("SIG")
    return getattr(signal, name, signal.SIGUSR2)


def preempt_signal() -> signal.Signals | None:
    """The signal submitit requeues on, inside a submitit job; None elsewhere."""
    return submitit_preempt_signal() if under_submitit() else None


def stop_request() -> StopRequest:
    """The run's stop request: every stop signal, plus submitit's preemption signal as a requeue."""
    preempt = preempt_signal()
    if preempt is None:
        return StopRequest()
    return StopRequest({**DEFAULT_REACTIONS, preempt: Reaction.REQUEUE})


def hand_back(stop: StopRequest) -> None:
    """After the run has saved: re-raise a requeue signal so that submitit's handler requeues the job (it
    exits the process); a no-op for every other ending."""
    if stop.reaction is Reaction.REQUEUE and stop.signum is not None:
        signal.raise_signal(stop.signum)


def join_submitit_tasks() -> None:
    """A submitit job of several tasks (hydra.launcher.tasks_per_node × nodes) is one multi-process run:
    submitit's view of the ranks is exported as torch.distributed's env:// variables (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and the tasks join one process group, as under torchrun."""
    if not under_submitit():
        return
    import submitit

    if submitit.JobEnvironment().num_tasks <= 1:
        return
    # every task keeps seeing all of the node's GPUs: normlab.distributed picks cuda:LOCAL_RANK
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    distributed.from_env()


def requeued_resume(run_dir: Path) -> bool:
    """Whether a submitit job is starting again in a run directory it was stopped in: summary.json says
    interrupted (or running: the job was killed before it could say more) and a checkpoint is there."""
    if not under_submitit():
        return False
    try:
        status = json.loads((run_dir / SUMMARY_FILE).read_text()).get("status")
    except (OSError, ValueError):
        return False
    return status in ("interrupted", "running") and bool(checkpoint.candidates(run_dir / CHECKPOINT_DIR))
