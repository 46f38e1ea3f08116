"""normlab's whole training loop, instrumentation on, against nanoGPT's minimal loop on the same model shape.

The benchmark lives in normlab.bench.loop (its docstring says what is measured and how);
`python scripts/bench_loop.py --help` lists its options.
"""

from normlab.bench.loop import main

if __name__ == "__main__":
    main()
