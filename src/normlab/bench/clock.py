"""`--clock` of the interleaved benchmarks (loop, overhead): what a timed stretch of steps is measured by."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def add_clock_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall time (the real measure), or this process's CPU time: with --threads 1 it counts the work "
        "done, not the time lost to other processes, for a first look on a busy machine",
    )
