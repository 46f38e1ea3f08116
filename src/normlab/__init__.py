"""normlab: where should the normalization go in a Transformer, and which one?"""

__version__ = "0.1.0"
