"""Several runs trained as one model: each member is a normlab GPT of its own (its own seed, learning rate,
schedule, ...), and their parameters are stacked along a leading dimension so that one forward and one
backward train them all (`hydra/launcher=stacked`, docs/scaling.md "When to stack").

- `model.py`: `StackedModel`, the members' parameters in one (members × parameters) buffer and their
  forward as `torch.vmap` of the GPT's own forward (a parameterless copy holding the stacked tensors);
- `batches.py`: `StackedBatches`, every member's training windows from its own data RNG, a block of steps
  ahead, gathered in one indexing a step;
- `optim.py`: `StackedAdamW`, AdamW with each member's own hyperparameters on that buffer, its
  coefficients a table made a block of steps ahead;
- `head.py`: the LM head and objective of every member in one batched call (the CPU's fused head, or the
  batched logits elsewhere);
- `probe.py`: the instrumented steps' measurements, per member;
- `trainer.py`: `StackedTrainer`, one step of every member (no loop over them), evaluation and each
  member's state in a single run's checkpoint format — what the one training loop (normlab.train.fit)
  drives, as it drives a run alone's Trainer;
- `run.py`: `StackedRun`, the members' `Run`s (their directories, starts, summaries, checkpoints and
  W&B runs) around one `StackedTrainer`.
"""
