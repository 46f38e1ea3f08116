"""The study layer: published claims about normalization tested on normlab's own runs.

It sits above `normlab.analysis` (which only reads run directories) and `normlab.bench`: a finding
(`findings/`) names its preset, evaluates the preset's runs into checks and a verdict (`verdicts`), may
measure something besides the runs (`Finding.measurements`, e.g. the norm profiler); `robustness` re-reads
a verdict without one seed or under a perturbation; `reproduce` launches the presets' sweeps and
measurements (scripts/reproduce.py; one sweep: `preset_sweep`, the stop signals passed on to it:
`sweep_signals`), recording what they cost in timings.json (`timings`), and
`findings_report` writes REPORT.md and the README's findings table from them.
"""
