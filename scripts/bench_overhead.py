"""Cost of the instrumentation: training steps/s with metrics on vs off, in one process.

The benchmark lives in normlab.bench.overhead (its docstring says what is measured and how);
`python scripts/bench_overhead.py --help` lists its options.
"""

from normlab.bench.overhead import main

if __name__ == "__main__":
    main()
