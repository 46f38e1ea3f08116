#!/usr/bin/env python
"""A W&B workspace laid out for a sweep's comparison (normlab.analysis.dashboard).

python scripts/compare.py outputs/sweeps/DATE/TIME_NAME             # the report and its figures first
python scripts/dashboard.py outputs/sweeps/DATE/TIME_NAME           # build it offline, list its panels
python scripts/dashboard.py outputs/sweeps/DATE/TIME_NAME --save    # upload it (wandb login first)
"""

import sys

from normlab.analysis.dashboard import main

if __name__ == "__main__":
    sys.exit(main())
