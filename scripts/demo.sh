#!/usr/bin/env bash
# The README's Quick start demo: the comparison normlab exists for — Pre-LN against Post-LN — on the embedded
# corpus (offline), three seeds each so that the report can test the difference, run in parallel on every
# core, then the comparison report. Extra arguments are passed to train.py.
#
# 6 runs of the tiny model (d_model 64, 6 blocks, LayerNorm), 200 steps of batch 32 × 64 tokens each, one job
# per core with one torch thread. The LM head is untied (model.tie_embeddings=false): with the default tied
# N(0, 0.02) embeddings Post-LN can stay at the unigram loss for a reason of its own (finding 10; the run's
# pre-flight line says so), and the demo compares the placements, not that. Every run learns: its validation
# loss ends well below the corpus's unigram loss (5.74 nats/token for this 1024-token BPE). No two runs are
# the same network (a no-norm control would be one network under both placements). About 25 s per run on an
# idle core.
#
# `bash scripts/demo.sh --docs` also regenerates what the documentation shows of the demo: docs/demo/
# (report.md, summary.csv, runs.csv and the figures, drawn at 72 dpi) from this sweep.
# tests/test_demo_docs.py fails when the shipped docs/demo/ was made with settings other than the two lines
# below, and when docs/demo.md's numbers and sentences are not the shipped report's.
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
variants=(placement=pre,post seed=0,1,2)
settings=(norm=ln model=tiny model.tie_embeddings=false train.max_steps=200 train.eval_every=50 train.eval_batches=10 warmup_steps=100 data=synthetic data.vocab_size=1024 logger=none experiment_name=demo hydra/launcher=joblib)
sweep="outputs/demo"
runs=6
per_run_s=25
cores=$(python -c "import os; print(len(os.sched_getaffinity(0)))" 2>/dev/null || nproc)
waves=$(((runs + cores - 1) / cores))
expected=$((waves * per_run_s + 25))
echo "normlab demo: ${runs} runs on ${cores} cores, then the report — expected about $((expected / 60)) min $((expected % 60)) s" \
  "(more if the machine is busy). Progress: a [sweep] line every 30 s and as each run ends."
rm -rf "$sweep"
start=$SECONDS
python train.py -m "${variants[@]}" "${settings[@]}" hydra.sweep.dir="$sweep" "$@"
echo "training took $((SECONDS - start)) s; writing the report ..."
python scripts/compare.py "$sweep" --out "$sweep/report"
if $docs; then
  python scripts/compare.py "$sweep" --out "$sweep/docs" --dpi 72
  # report.html is left out: it embeds every figure, and the site shows report.md with them
  rm -rf docs/demo
  mkdir -p docs/demo
  cp "$sweep"/docs/{*.png,report.md,summary.csv,runs.csv} docs/demo/
  echo "docs/demo/ regenerated; copy the sentences under its figures into docs/demo.md (tests/test_demo_docs.py checks them)"
fi
echo "demo finished in $((SECONDS - start)) s"
