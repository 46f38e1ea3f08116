#!/usr/bin/env bash
# The README's Quick start demo: a small norm × placement comparison on the embedded corpus (offline),
# run in parallel on every core, then the comparison report. Extra arguments are passed to train.py.
set -euo pipefail
cd "$(dirname "$0")/.."
sweep="outputs/demo"
rm -rf "$sweep"
python train.py -m norm=ln,rms,none placement=pre,post model=tiny train.max_steps=300 train.eval_every=50 \
  warmup_steps=50 data=synthetic data.vocab_size=1024 logger=none experiment_name=demo hydra/launcher=joblib \
  hydra.sweep.dir="$sweep" "$@"
python scripts/compare.py "$sweep" --out "$sweep/report"
