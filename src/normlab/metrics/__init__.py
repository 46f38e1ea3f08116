"""Measurements taken during training: names, gradient norms, sinks."""
