"""Train one GPT variant: `python train.py norm=rms placement=pre depth=12 warmup_steps=0` (add -m to sweep).

The same entry point as `normlab-train` and `python -m normlab` (normlab.cli.main); the configs are in
configs/ (a link to src/normlab/configs, shipped with the package).
"""

import sys

if __name__ == "__main__":
    try:
        from normlab.cli import main
    except KeyboardInterrupt:  # Ctrl-C while torch and Hydra load: nothing started, nothing to save
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    main()
