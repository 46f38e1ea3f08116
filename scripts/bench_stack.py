"""Many small runs on one device: one at a time vs joblib vs stacked, on the same sweep.

The benchmark lives in normlab.bench.stack (its docstring says what is measured and how);
`python scripts/bench_stack.py --help` lists its options.
"""

from normlab.bench.stack import main

if __name__ == "__main__":
    main()
