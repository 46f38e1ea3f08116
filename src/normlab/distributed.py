"""One run on several processes: `torchrun --nproc_per_node=N train.py ...`.

torchrun starts N copies of train.py with RANK, WORLD_SIZE and LOCAL_RANK in the environment; `from_env`
joins them into a process group (gloo on CPU, nccl on CUDA). How a run uses it (train.loop, train.run):

- data: every rank draws the same global batch of batch_size × world_size windows from the same seeded
  stream and trains on its own slice of it, so the ranks see disjoint windows and a run of N ranks sees
  exactly the windows a 1-rank run with batch_size × N sees;
- gradients: after the backward, the ranks' gradients are averaged with one all-reduce, before the
  gradient norms, clipping and the optimizer step — so every logged norm, spike and divergence decision
  is the all-reduced one, identical on every rank (the loss is averaged the same way). normlab does this
  itself rather than through DistributedDataParallel's wrapper: the fused CPU head, the instrumented
  steps' hooks and torch.compile then work unchanged, and the only thing given up — overlapping the
  all-reduce with the backward — is small next to these models' steps;
- BatchNorm normalises with each rank's own batch statistics unless `norm.sync=true`;
- rank 0 alone writes the run directory (metrics, checkpoints, summary, W&B, sample); every rank stops
  at the same step when any of them is signalled.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class Dist:
    """Where this process stands in the run: rank `rank` of `world_size` (1 = not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """The rank that writes the run directory."""
        return self.rank == 0

    def device(self, requested: torch.device) -> torch.device:
        """This rank's GPU when the run asked for CUDA (one GPU per process), else `requested`."""
        if self.enabled and requested.type == "cuda" and requested.index is None:
            return torch.device("cuda", self.local_rank)
        return requested

    def average_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replace each tensor by its mean over the ranks, in one all-reduce."""
        if not self.enabled or not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        torch_dist.all_reduce(flat, op=torch_dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on any (a signal reaches ranks at different steps)."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=_comm_device())
        torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_text(self, text: str) -> str:
        """Rank 0's `text` on every rank."""
        if not self.enabled:
            return text
        box = [text]
        torch_dist.broadcast_object_list(box, src=0)
        return str(box[0])

    def barrier(self) -> None:
        if self.enabled:
            torch_dist.barrier()


SINGLE = Dist()


def _comm_device() -> torch.device:
    if torch_dist.is_initialized() and torch_dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def launched_by_torchrun() -> bool:
    return all(k in os.environ for k in ENV_KEYS) and int(os.environ["WORLD_SIZE"]) > 1


def current() -> Dist:
    """This process's place, once `from_env` has joined the group (SINGLE otherwise)."""
    if not torch_dist.is_available() or not torch_dist.is_initialized():
        return SINGLE
    return Dist(torch_dist.get_rank(), torch_dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def from_env(backend: str | None = None) -> Dist:
    """Join the process group torchrun describes in the environment (no-op for a plain `python`)."""
    if not launched_by_torchrun():
        return SINGLE
    if not torch_dist.is_initialized():
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() and torch_dist.is_nccl_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch_dist.init_process_group(backend=backend, timeout=dt.timedelta(minutes=30))
        # leave the group before the interpreter tears down: a gloo/nccl thread still running at exit
        # aborts the process ("terminate called without an active exception")
        atexit.register(_leave)
    return current()


def _leave() -> None:
    """Every rank leaves together: rank 0 finishes later (it writes the files and the sample), and a rank
    that tears down while another still holds the group's connections can abort in gloo's destructor."""
    if not torch_dist.is_initialized():
        return
    try:
        if torch_dist.get_backend() == "gloo":
            torch_dist.monitored_barrier(timeout=dt.timedelta(minutes=5))
        else:
            torch_dist.barrier()
    except Exception:  # a rank that died: nothing to wait for
        pass
    torch_dist.destroy_process_group()


def shared_run_dir_override(argv: Sequence[str], dist: Dist, now: dt.datetime | None = None) -> list[str]:
    """Extra Hydra overrides so that all ranks use one run directory and only rank 0 writes Hydra's files.

    Hydra names the run directory after the time it starts (configs/config.yaml: hydra.run.dir), and ranks
    start a moment apart: rank 0's time is broadcast unless the command sets hydra.run.dir itself. The
    other ranks skip the run-directory guard (rank 0 has already started writing there), .hydra/ and
    train.log.
    """
    if not dist.enabled:
        return []
    extra: list[str] = []
    if not any(a.startswith("hydra.run.dir=") for a in argv):
        stamp = dist.broadcast_text((now or dt.datetime.now()).strftime("%Y-%m-%d/%H-%M-%S"))
        extra.append(f"hydra.run.dir=outputs/runs/{stamp}_${{name}}")
    if not dist.is_main:
        extra += ["hydra.output_subdir=null", "hydra/job_logging=disabled", "~hydra.callbacks.run_dir_guard"]
    return extra
