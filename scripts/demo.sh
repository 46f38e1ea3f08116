#!/usr/bin/env bash
# The README's Quick start demo: a small norm × placement comparison on the embedded corpus (offline),
# run in parallel on every core, then the comparison report. Extra arguments are passed to train.py.
#
# 6 runs of the tiny model (d_model 64, 6 blocks), 200 steps of batch 32 × 64 tokens each, one job per core
# with one torch thread. Every run learns: its validation loss ends well below the corpus's unigram loss
# (5.74 nats/token for this 1024-token BPE). Warmup is half the run because Post-LN needs it: with 30 of 250
# warmup steps both post runs stayed at the unigram loss. About 25 s per run on an idle core (80 s for the whole demo measured at load 1–1.7).
#
# `bash scripts/demo.sh --docs` also regenerates what the documentation shows of the demo: docs/demo/
# (report.md, summary.csv, runs.csv and the figures, drawn at 72 dpi) from this sweep, and docs/demo/seeds3/
# from the LayerNorm pair (pre, post) with three seeds and the same settings, whose effect sentence
# docs/comparing.md quotes. It takes about twice the demo's time. tests/test_demo_docs.py fails when the
# shipped docs/demo/ was made with settings other than the two lines below.
set -euo pipefail
cd "$(dirname "$0")/.."
docs=false
if [[ "${1:-}" == "--docs" ]]; then
  docs=true
  shift
  if (($#)); then
    echo "error: --docs regenerates docs/demo/ with the demo's own settings, so it takes no other arguments;" \
      "run bash scripts/demo.sh --docs alone." >&2
    exit 2
  fi
fi
variants=(norm=ln,rms,none placement=pre,post)
settings=(model=tiny train.max_steps=200 train.eval_every=50 train.eval_batches=10 warmup_steps=100 data=synthetic data.vocab_size=1024 logger=none experiment_name=demo hydra/launcher=joblib)
sweep="outputs/demo"
runs=6
per_run_s=25
cores=$(python -c "import os; print(len(os.sched_getaffinity(0)))" 2>/dev/null || nproc)
waves=$(((runs + cores - 1) / cores))
expected=$((waves * per_run_s + 25))
if $docs; then expected=$((2 * expected)); fi
echo "normlab demo: ${runs} runs on ${cores} cores, then the report — expected about $((expected / 60)) min $((expected % 60)) s" \
  "(more if the machine is busy). Progress: a [sweep] line as each run ends."
rm -rf "$sweep"
start=$SECONDS
python train.py -m "${variants[@]}" "${settings[@]}" hydra.sweep.dir="$sweep" "$@"
echo "training took $((SECONDS - start)) s; writing the report ..."
python scripts/compare.py "$sweep" --out "$sweep/report"
if $docs; then
  seeds="outputs/demo_seeds3"
  echo "--docs: the LayerNorm pair with three seeds (6 runs) ..."
  rm -rf "$seeds"
  python train.py -m norm=ln placement=pre,post seed=0,1,2 "${settings[@]}" hydra.sweep.dir="$seeds"
  python scripts/compare.py "$sweep" --out "$sweep/docs" --dpi 72
  python scripts/compare.py "$seeds" --out "$seeds/docs" --dpi 72
  # report.html is left out: it embeds every figure, and the site shows report.md with them
  rm -rf docs/demo
  mkdir -p docs/demo/seeds3
  cp "$sweep"/docs/{*.png,report.md,summary.csv,runs.csv} docs/demo/
  cp "$seeds"/docs/{*.png,report.md,summary.csv,runs.csv} docs/demo/seeds3/
  echo "docs/demo/ and docs/demo/seeds3/ regenerated; check docs/demo.md's sentences against them"
fi
echo "demo finished in $((SECONDS - start)) s"
