"""`train.compile`: torch.compile for the training forward, or a plain module where it cannot work."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger("normlab")


def cpp_compiler() -> str | None:
    """The C++ compiler Inductor's CPU backend would build with (its own search: $CXX / config, g++),
    or None where there is none."""
    try:
        from torch._inductor import cpp_builder

        return cpp_builder.get_cpp_compiler()
    except Exception:  # Inductor raises its own InvalidCxxCompiler; anything else means "not usable" too
        return None


# train.compile_mode → torch.compile's arguments; Inductor options passed this way apply to this compile
# only, not to the process
MODES: dict[str, dict] = {
    "default": {},
    "tuned": {"options": {"coordinate_descent_tuning": True}},
    "max-autotune": {"mode": "max-autotune-no-cudagraphs"},
    # CUDA graphs: a step whose host work is its time (a stack of small runs on a GPU) replays recorded
    # graphs instead of launching each kernel (issue 36: kept where the next GPU measurement finds it faster)
    "reduce-overhead": {"mode": "reduce-overhead"},
}


def graphs(mode: str, device: torch.device) -> bool:
    """Whether `mode` records CUDA graphs on `device` (their inputs that a step changes in place must then
    stay at one address: `static`)."""
    return mode == "reduce-overhead" and device.type == "cuda"


def static(*tensors: torch.Tensor) -> None:
    """Mark buffers a compiled step updates in place as living at one address, which CUDA graphs need to
    replay without copying them (torch._dynamo.mark_static_address)."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


def compile_module(fn: Callable, device: torch.device, mode: str = "default") -> Callable:
    """torch.compile(fn) as `mode` (train.compile_mode) says; on a CPU without a C++ compiler, fn itself,
    after one warning sentence."""
    if device.type == "cpu" and cpp_compiler() is None:
        log.warning(
            "train.compile=true needs a C++ compiler for torch.compile on the CPU and none was found "
            "(g++, or the one $CXX names), so this run trains uncompiled; install g++ to compile."
        )
        return fn
    return torch.compile(fn, **MODES[mode])
