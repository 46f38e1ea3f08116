"""`python -m normlab norm=rms placement=pre`: the same as train.py and normlab-train."""

from normlab.cli import main

main()
