"""Prepare a corpus's token cache ahead of training (e.g. on a login node before a cluster sweep).

    python scripts/prepare_data.py data=tinystories data.path=~/data/TinyStories
    python scripts/prepare_data.py data=tinystories data.max_train_stories=100000 data.max_val_stories=5000
    python scripts/prepare_data.py                     # the default corpus of configs/config.yaml

Takes the same Hydra overrides as train.py (only the `data` group matters) and prints where the cache
went and how big it is. Training runs with the same `data.*` settings then start instantly.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time


def compose_data(overrides: list[str]) -> dict:
    """The resolved `data` group, composed from the package's configs exactly as train.py would (only the
    data group is needed; other overrides, norm=... or depth=..., are accepted and ignored)."""
    from omegaconf import OmegaConf

    from normlab.config.compose import compose_config

    return OmegaConf.to_container(compose_config(overrides).data, resolve=True)  # type: ignore[return-value]


def hydra_message(err: Exception) -> str:
    """Hydra's error as one line: its first line plus the available options, if it lists them."""
    lines = [ln.strip() for ln in str(err).strip().splitlines()]
    options: list[str] = []
    if any(ln.startswith("Available options") for ln in lines):
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Available options")) + 1
        for ln in lines[start:]:
            if not ln or ln.startswith("Config search path"):
                break
            options.append(ln)
    return lines[0] + (f"; choose one of: {', '.join(options)}." if options else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Tokenize a corpus into the shared token cache (same overrides as train.py).",
        epilog="example: python scripts/prepare_data.py data=tinystories data.path=DIR",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data=tinystories data.path=DIR")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")

    from hydra.errors import HydraException

    from normlab.data import load_corpus
    from normlab.errors import UserError

    try:
        data_cfg = compose_data(args.overrides)
        t0 = time.perf_counter()
        corpus = load_corpus(data_cfg, progress=not args.quiet)
        seconds = time.perf_counter() - t0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except HydraException as err:  # a bad override
        print(f"error: {hydra_message(err)}", file=sys.stderr)
        return 2

    size = sum(p.stat().st_size for p in corpus.cache_dir.iterdir() if p.is_file())
    meta = json.loads((corpus.cache_dir / "meta.json").read_text())
    print(f"data={data_cfg['name']} prepared in {seconds:.1f}s")
    print(f"  cache:      {corpus.cache_dir}")
    print(f"  size:       {size / 2**20:.1f} MiB")
    print(f"  train:      {len(corpus.train):,} tokens, {meta['train_stories']:,} stories")
    print(f"  validation: {len(corpus.val):,} tokens, {meta['val_stories']:,} stories")
    print(f"  vocabulary: {corpus.vocab_size:,} tokens ({corpus.train.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
