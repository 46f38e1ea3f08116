"""The cost of embed/effective_rank against a training step of the same model.

The benchmark lives in normlab.bench.embedding_rank (its docstring says what is measured and how);
`python scripts/bench_embedding_rank.py --help` lists its options.
"""

from normlab.bench.embedding_rank import main

if __name__ == "__main__":
    main()
