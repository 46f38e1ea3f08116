"""Re-run published findings about normalization and write REPORT.md with a verdict for each.

    python scripts/reproduce.py --core          # findings 1, 2, 4, 5: about 10 minutes on 2 CPU cores
    python scripts/reproduce.py                 # all of them
    python scripts/reproduce.py --list          # the findings and their presets
    python scripts/reproduce.py --from-existing --out DIR   # rebuild the report without training

See `python scripts/reproduce.py --help` and normlab/study/reproduce.py.
"""

import sys

from normlab.study.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
