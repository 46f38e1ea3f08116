"""normlab against nanoGPT on one GPU: tokens/s, the ratio to nanoGPT and MFU, at the GPT-2-small shape.

The benchmark lives in normlab.bench.gpu (its docstring says what is measured and how);
`python scripts/bench_gpu.py --help` lists its options.
"""

from normlab.bench.gpu import main

if __name__ == "__main__":
    main()
