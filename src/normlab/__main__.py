"""`python -m normlab norm=rms placement=pre`: the same as train.py and normlab-train."""

import sys

try:
    from normlab.cli import main
except KeyboardInterrupt:  # Ctrl-C while torch and Hydra load: nothing started, nothing to save
    print("interrupted", file=sys.stderr)
    sys.exit(130)

main()
