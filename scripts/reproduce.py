"""Re-run published findings about normalization and write REPORT.md with a verdict for each.

    python scripts/reproduce.py --core          # findings 1, 2, 4, 5 with their robustness sweeps: it prints
                                                # its expected time first (≈ 23 min on 2 idle CPU cores)
    python scripts/reproduce.py                 # all of them
    python scripts/reproduce.py --core --scale paper   # the same at the sources' scale, on a GPU
    python scripts/reproduce.py --scale pilot --budget 480 --out DIR   # the depth findings on one GPU, in 8 min
    python scripts/reproduce.py --list          # the findings and their presets
    python scripts/reproduce.py --from-existing --out DIR   # rebuild the report without training

See `python scripts/reproduce.py --help` and normlab/study/reproduce.py.
"""

import sys

from normlab.study.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
