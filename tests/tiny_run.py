"""The overrides that size a run down to seconds on a CPU, every knob still going through the real config
tree. Test files add what they vary (steps, evaluation, batch, warm-up); `model=tiny` is added where the
preset under test does not choose its own model."""

from __future__ import annotations

# a small slice of the embedded corpus and a small BPE vocabulary
CORPUS = ["data=synthetic", "data.n_train_stories=400", "data.n_val_stories=40", "data.vocab_size=512"]
# short windows, two evaluation batches, no progress bar, two blocks, nothing sent to W&B
LOOP = ["logger=none", "train.seq_len=32", "train.eval_batches=2", "train.progress=false", "depth=2"]
# a tiny model for three steps, no evaluation before the end, a short warm-up
SHORT = [
    "model=tiny",
    *LOOP,
    "train.batch_size=8",
    "train.max_steps=3",
    "train.eval_every=0",
    "warmup_steps=2",
]
