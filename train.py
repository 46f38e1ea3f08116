"""Train one GPT variant: `python train.py norm=rms placement=pre depth=12 warmup_steps=0` (add -m to sweep)."""

import hydra
from omegaconf import DictConfig

from normlab.config_help import register_help_resolver

register_help_resolver()  # `--help` lists every knob with its comment from configs/


@hydra.main(config_path="configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from normlab.cli import run_hydra_job

    return run_hydra_job(cfg)


if __name__ == "__main__":
    from normlab.cli import guarded, join_torchrun

    join_torchrun()  # torchrun: one process group and one run directory for all ranks
    guarded(main)  # Hydra's own errors (unknown option, bad override, bad run dir) as one sentence
