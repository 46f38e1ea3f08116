#!/usr/bin/env bash
# The Python 3.12 wheels that scripts/gpu_pilot.sh and scripts/gpu_checks.sh install on a GPU machine with
# torch but without a package index or hydra-core (the device image has numpy, pandas, matplotlib, scipy,
# tokenizers, joblib, cloudpickle, filelock, tqdm, pyyaml, markdown-it-py): into .whl/ (git-ignored; name
# it in the device call's carry).
#   bash scripts/gpu_wheels.sh          # run here, where pip reaches PyPI
# Versions: the ones installed here (those the tests pass with). antlr4-python3-runtime 4.9.3, which
# omegaconf 2.3 pins, is published as a source distribution only: pip builds its (pure-Python) wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.whl}
mkdir -p "$DEST"
version() { python3 -m pip show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'; }
for pkg in hydra-core omegaconf hydra-joblib-launcher hydra-submitit-launcher submitit platformdirs; do
    v=$(version "$pkg")
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 -d "$DEST" "$pkg${v:+==$v}"
done
python3 -m pip wheel -q --no-deps -w "$DEST" "antlr4-python3-runtime==$(version antlr4-python3-runtime)"
ls -la "$DEST"
du -sh "$DEST"
