"""normlab's sweep launchers as Hydra plugins.

Hydra builds launchers only from classes defined in the `hydra_plugins` namespace package, so the classes
it builds are named here; what they do is in `normlab.sweeps` (see its docstring), and the callback
`normlab.sweeps.NormlabLaunchers` puts them in place of Hydra's own when a multirun starts.
"""

from normlab.sweeps import in_process, pool, stacked


class InProcessLauncher(in_process.InProcessLauncher):
    """hydra/launcher=basic: jobs one after another in the sweep's process."""


class LocalPoolLauncher(pool.LocalPoolLauncher):
    """hydra/launcher=joblib: n_jobs jobs at once, each in a process of its own."""


class StackedLauncher(stacked.StackedLauncher):
    """hydra/launcher=stacked: the jobs that share a compute graph trained as one stacked model."""


try:
    from normlab.sweeps import submitit
except ImportError:  # hydra-submitit-launcher is not installed: no submitit launchers to replace
    pass
else:

    class SubmititLocalLauncher(submitit.SubmititLocalLauncher):
        """hydra/launcher=submitit_local: local submitit jobs, signals passed on by the sweep's process."""

    class SubmititSlurmLauncher(submitit.SubmititSlurmLauncher):
        """hydra/launcher=slurm: SLURM jobs; the sweep's process submits, waits and reports."""
