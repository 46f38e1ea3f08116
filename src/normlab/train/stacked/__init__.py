"""Several runs trained as one model: each member is a normlab GPT of its own (its own seed, learning rate,
schedule, ...), and their parameters are stacked along a leading dimension so that one forward and one
backward train them all (`hydra/launcher=stacked`, docs/scaling.md "When to stack").

- `model.py`: `StackedModel`, the members' parameters in one (members × parameters) buffer and their
  forward as `torch.vmap` of the GPT's own forward (`torch.func.functional_call`);
- `optim.py`: `StackedAdamW`, AdamW with each member's own hyperparameters on that buffer;
- `head.py`: the LM head and objective of every member (the fused CPU head member by member, elsewhere
  one batched matrix product);
- `probe.py`: the instrumented steps' measurements, per member;
- `trainer.py`: `StackedTrainer`, one step of every member, evaluation and each member's state in a single
  run's checkpoint format;
- `loop.py`: `StackedLoop`, the trainer's loop and each member's ending; each member's rows go through the
  single run's `PendingRows`, `Monitor` and callbacks;
- `run.py`: `StackedRun`, the members' `Run`s (their directories, starts, summaries, checkpoints and
  W&B runs) around one `StackedTrainer`.
"""
