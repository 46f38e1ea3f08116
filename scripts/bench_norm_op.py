"""One norm's forward + backward, RMSNorm against LayerNorm, timed interleaved.

The benchmark lives in normlab.bench.norm_op (its docstring says what is measured and how);
`python scripts/bench_norm_op.py --help` lists its options.
"""

from normlab.bench.norm_op import main

if __name__ == "__main__":
    main()
