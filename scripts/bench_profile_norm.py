"""RMSNorm vs LayerNorm: step time of the two models (ABBA-interleaved, one thread) and the share of each step
spent in normalization (torch.profiler) — finding 5's speed measurement.

The benchmark lives in normlab.bench.profile_norm; `python scripts/bench_profile_norm.py --help` lists its
options (`python -m normlab.bench.profile_norm` is the same).
"""

import sys

from normlab.bench.profile_norm import main

if __name__ == "__main__":
    sys.exit(main())
