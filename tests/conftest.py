"""Shared fixtures: a composed config of the real Hydra tree, sized for seconds on a CPU."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from omegaconf import DictConfig
from tiny_run import CORPUS, SHORT

from normlab.config.compose import compose_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"

# A tiny model on a tiny slice of the embedded corpus: every knob still goes through the real config tree.
TINY = [*SHORT, *CORPUS, "train.sample_tokens=4"]


@pytest.fixture(autouse=True)
def stop_signal_handlers_restored() -> Iterator[None]:
    """train.py run in this process leaves its command's last handlers (a signal after the command ended is
    ignored until the process exits): pytest gets its own back after each test."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    before = {s: signal.getsignal(s) for s in signals}
    yield
    for s, handler in before.items():
        signal.signal(s, handler if handler is not None else signal.SIG_DFL)


@pytest.fixture(scope="session")
def tiny_overrides() -> list[str]:
    return list(TINY)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("normlab-cache")


@pytest.fixture
def make_cfg(cache_dir: Path) -> Callable[..., DictConfig]:
    def make(*overrides: str) -> DictConfig:
        return compose_config([*TINY, f"data.cache_dir={cache_dir}", *overrides])

    return make
