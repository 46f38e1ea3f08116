"""Training: optimizer, schedules, checkpoints, the loop, and a run's lifecycle."""
