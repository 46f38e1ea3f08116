"""The GPU pilot of the depth findings (issue 38; `scripts/reproduce.py --scale pilot`): findings 12 and 13
(and 4 when the budget fits it) at d_model 256 on one GPU, within a time budget, where the curse of depth
can happen — between the CPU presets, too little trained to show it, and the papers' scale.

- `plan`: one train.max_steps for every run from what the sweeps cost, the schedule that follows, plan.json;
- `figures`: the static cost model (the last GPU measurements; the CPU calibration) for a dry run;
- `probe`: the step times measured on the device in a few steps, before the plan;
- `sweeps`: the presets, placements and seeds per finding, the packing, the sweeps launched at once;
- `run`: the command line's flow (data, probe, plan, training, report);
- `evaluate`: each finding's verdict on its pilot runs, through the finding's own `evaluate`.

The report's part is `normlab.study.findings_report.pilot`. Modules are imported by name (nothing here), so
the report can read a pilot without loading the launcher.
"""
