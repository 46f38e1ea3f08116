"""Benchmarks and profilers: they drive the training loop to time it (a layer above train/, below the CLI)."""
