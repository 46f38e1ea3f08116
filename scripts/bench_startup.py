"""A run's fixed cost: wall time of train.py ... train.max_steps=0 beyond import torch, and where it goes.

The benchmark lives in normlab.bench.startup (its docstring says what is measured and how);
`python scripts/bench_startup.py --help` lists its options.
"""

from normlab.bench.startup import main

if __name__ == "__main__":
    main()
