"""LayerNorm's share of a training step, and LayerNorm vs RMSNorm step time (ABBA-interleaved), on one device —
finding 5's speed measurement; on a GPU it decides the speed half of RMSNorm's claim.

The benchmark lives in normlab.bench.norm_share; `python scripts/bench_norm_share.py --help` lists its
options (`python -m normlab.bench.norm_share` is the same):

    python scripts/bench_norm_share.py --device cuda --json outputs/reproduce/<run>/sweeps/rmsnorm_speed/norm_share.json
"""

import sys

from normlab.bench.norm_share import main

if __name__ == "__main__":
    sys.exit(main())
