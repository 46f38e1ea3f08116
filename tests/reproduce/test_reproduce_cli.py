"""scripts/reproduce.py end to end on a tiny preset sweep, --from-existing, name resolution, profile_norm."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from drawn import assert_drawn

from normlab.bench import profile_norm
from normlab.study.findings import CORE, FINDINGS, Measurement
from normlab.study.findings_report import REPORT_FILE
from normlab.study.reproduce import main, resolve_names
from normlab.study.verdicts import VERDICTS


@pytest.mark.slow
def test_reproduce_runs_the_preset_and_writes_the_report(tiny_reproduction):
    out = tiny_reproduction
    runs = [d for d in (out / "sweeps" / "xiong_warmup").iterdir() if (d / "summary.json").is_file()]
    assert len(runs) == 8  # 2 placements × 2 warmups × 2 seeds, launched by joblib
    assert all(json.loads((d / "summary.json").read_text())["status"] == "completed" for d in runs)
    timings = json.loads((out / "timings.json").read_text())
    record = timings["findings"]["xiong_warmup"]
    assert record["rc"] == 0 and record["wall_s"] > 0 and record["machine"]["cores"] >= 1
    assert record["command"].startswith("python train.py -m +experiment=findings/xiong_warmup")
    report = (out / REPORT_FILE).read_text()
    assert "## 2. Warm-up and Post-LN" in report
    assert "**Claim.**" in report and "**Source.** Xiong et al. 2020" in report
    assert any(f"**Verdict: {v}**" in report for v in VERDICTS)
    assert "**Checks.**" in report and "## How verdicts are decided" in report
    assert "| estimate [90 % CI] | df | claim tested | verdict |" in report  # intervals, not z-scores
    assert "Welch–Satterthwaite" in report and "setup failed" in report
    assert "Machine:" in report and "wall time" in report
    for png in ("xiong_warmup_loss.png", "xiong_warmup_grid.png"):
        assert f"({png})" in report
        assert_drawn(out / png)
        assert (out / png).stat().st_size < 300_000  # small enough to commit beside REPORT.md


@pytest.mark.slow  # tiny_reproduction trains the preset (about a minute)
def test_from_existing_rebuilds_the_report_without_training(tiny_reproduction, tmp_path, capsys):
    sweep = tiny_reproduction / "sweeps" / "xiong_warmup"
    before = {p: p.stat().st_mtime for p in sweep.rglob("summary.json")}
    rc = main(["--from-existing", "--out", str(tiny_reproduction), "--report-dir", str(tmp_path)])
    assert rc == 0
    assert {p: p.stat().st_mtime for p in sweep.rglob("summary.json")} == before
    rebuilt = (tmp_path / REPORT_FILE).read_text()
    original = (tiny_reproduction / REPORT_FILE).read_text()
    verdict = next(line for line in original.splitlines() if line.startswith("**Verdict:"))
    assert verdict in rebuilt
    assert "rebuilt from existing sweeps" in rebuilt
    assert (tmp_path / "xiong_warmup_loss.png").is_file()
    assert "xiong_warmup:" in capsys.readouterr().out


@pytest.mark.slow  # tiny_reproduction trains the preset (about a minute)
def test_the_readme_table_is_written_from_the_same_evaluation(tiny_reproduction, tmp_path):
    """--readme writes the findings table between the README's markers from the outcomes REPORT.md shows;
    what lies outside the markers is kept; a README without markers is refused in one sentence."""
    from normlab.study.findings_report.overview import README_END, README_START

    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{README_START}\nold table\n{README_END}\nafter\n")
    assert (
        main(
            [
                "--from-existing",
                "--out",
                str(tiny_reproduction),
                "--report-dir",
                str(tmp_path / "r"),
                "--readme",
                str(readme),
            ]
        )
        == 0
    )
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith("after\n") and "old table" not in text
    table = text.split(README_START)[1].split(README_END)[0]
    report = (tmp_path / "r" / REPORT_FILE).read_text()
    verdict = next(line for line in report.splitlines() if line.startswith("**Verdict:"))
    assert f"**{verdict.split('**Verdict: ')[1].split('**')[0]}**" in table
    assert "| 2 | Without warm-up Post-LN ends worse" in table and "`xiong_warmup` (core)" in table
    assert "90 %" in table and "decided at" in table
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(ValueError, match="markers"):
        from normlab.study.findings_report.overview import write_readme_table

        write_readme_table(bare, "x")


def test_from_existing_without_sweeps_fails_clearly(tmp_path, capsys):
    assert main(["--from-existing", "--out", str(tmp_path)]) == 2
    assert "no sweeps" in capsys.readouterr().err


def test_resolve_names():
    assert resolve_names([], core=True) == list(CORE)
    assert resolve_names(["7", "xiong_warmup"], core=False) == ["xiong_warmup", "wortsman_qk_norm"]
    assert len(resolve_names([], core=False)) == len(FINDINGS)
    with pytest.raises(SystemExit, match="unknown finding"):
        resolve_names(["nope"], core=False)


def test_list(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "1. xiong_grad_profile (core)" in out and "9. takase_embed_scale" in out
    assert "10. tied_embedding_collapse" in out


def test_profile_norm_measures_both_norms(tiny):
    result = profile_norm.run(
        [o for o in tiny if not o.startswith("train.max_steps")], blocks=2, steps_per_block=2, profile_steps=2
    )
    assert result["norms"] == ["ln", "rms"] and result["threads"] == 1
    assert len(result["timing"]["log_ratio"]) == 2 and math.isfinite(result["timing"]["log_ratio_mean"])
    for norm in ("ln", "rms"):
        p = result["profile"][norm]
        assert p["norm_calls_per_step"] == 2 * 2 + 1  # depth 2, Pre-LN: 2 per block + the final norm
        assert 0 < p["norm_forward_ms"] < p["step_ms"]
        assert 0 < p["norm_backward_ms"] < p["step_ms"]  # backward nodes found by sequence number
        assert 0 < p["norm_share"] < 1
        assert 0 < result["flops"][norm]["norm_flop_share"] < 0.5
    json.dumps(result)  # stored next to the sweep as JSON
    assert len(profile_norm.summary_lines(result)) == 3


def test_norm_share_measures_the_share_and_the_step_times_on_the_cpu(tiny):
    """normlab.bench.norm_share, finding 5's speed measurement, runs on the CPU with the code a GPU runs:
    LayerNorm's norms alone as a share of its step (upper bound of any saving), and ABBA step times."""
    from normlab.bench import norm_share

    result = norm_share.run(
        [o for o in tiny if not o.startswith("train.max_steps")], device="cpu", reps=2, steps=1, threads=1
    )
    assert result["device"] == "cpu" and result["threads"] == 1
    assert result["norm_calls_per_step"] == 2 * 2 + 1  # depth 2, Pre-LN: 2 per block + the final norm
    assert len(result["share"]) == 2 and all(0 < x < 1 for x in result["share"])
    assert len(result["log_ratio"]) == 2 and all(math.isfinite(x) for x in result["log_ratio"])
    assert len(result["step_s"]["ln"]) == len(result["step_s"]["rms"]) == 2
    json.dumps(result)
    lines = norm_share.summary_lines(result)
    assert "of its step" in lines[0] and "log(t_LN / t_RMS)" in lines[1]
    assert norm_share.pick_device("auto").type in ("cpu", "cuda")


def test_a_preset_whose_grid_holds_invalid_combinations_is_not_a_failure(tmp_path):
    """deepnet_model_update sweeps norm=ln,deepnorm × placement=pre,post: deepnorm-pre is invalid, recorded
    and skipped; the sweep then exits 2, which scripts/reproduce.py does not count as a failed finding."""
    from normlab.study.preset_sweep import only_invalid_skipped

    for name, status in (("0_a", "completed"), ("1_b", "invalid"), ("2_c", "diverged")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": status}))
    assert only_invalid_skipped(tmp_path)
    (tmp_path / "3_d").mkdir()
    (tmp_path / "3_d" / "summary.json").write_text(json.dumps({"status": "failed"}))
    assert not only_invalid_skipped(tmp_path)
    assert not only_invalid_skipped(tmp_path / "absent")


def test_a_findings_measurement_is_stored_beside_its_sweep_and_read_back(tmp_path):
    """Finding.measure: each Measurement taken with the preset's overrides (Hydra's own left out), stored
    as JSON in the sweep directory, its lines echoed; load_extras reads it back for a rebuilt report."""
    taken = []

    def take(overrides):
        taken.append(list(overrides))
        return {"overrides": list(overrides), "value": 1.5}

    probe = Measurement("probe", "probe.json", take, lambda r: [f"value {r['value']}"])
    finding = replace(FINDINGS["rmsnorm_speed"], measurements=(probe,))
    lines = []
    extras = finding.measure(tmp_path, ["optim.lr=1e-2", "hydra.launcher.n_jobs=2", "~hydra.x"], lines.append)
    assert taken == [["optim.lr=1e-2"]] and lines == ["value 1.5"]
    assert extras == {"probe": {"overrides": ["optim.lr=1e-2"], "value": 1.5}}
    assert json.loads((tmp_path / "probe.json").read_text()) == extras["probe"]
    assert finding.load_extras(tmp_path) == extras
    assert finding.load_extras(tmp_path / "not-measured") == {}
    # finding 5's own measurements: the CPU norm profiler, stored where earlier reports looked for it, the
    # norm share and step time on the best device there is (norm_share.json), and the same from a run on
    # the claim's device, dropped in beside the sweep (norm_share.device.json) — read, never taken here
    profile, speed, device = FINDINGS["rmsnorm_speed"].measurements
    assert (profile.key, profile.file) == ("profile", "profile_norm.json")
    assert (speed.key, speed.file) == ("speed", "norm_share.json")
    assert (device.key, device.file, device.taken) == ("speed_device", "norm_share.device.json", False)
    dropped = replace(
        FINDINGS["rmsnorm_speed"],
        measurements=(probe, replace(probe, key="other", file="o.json", taken=False)),
    )
    assert dropped.measure(tmp_path, [], lines.append).keys() == {"probe"}  # the dropped-in one is not taken
    assert all(not f.measurements for f in FINDINGS.values() if f.name != "rmsnorm_speed")


def test_the_core_sets_wall_time_names_the_share_of_its_perturbed_sweeps():
    from normlab.study.findings_report.header import totals_line

    findings = {n: {"wall_s": 300.0, "perturbed": {"wall_s": 120.0}} for n in CORE}
    line = totals_line({"findings": findings}, list(CORE))
    # 4 × 300 s = 20 min in all, 4 × 120 s = 8 min of it in the perturbed sweeps
    assert "20 min 00 s (8 min 00 s of it the perturbed sweeps" in line
    findings = {n: {"wall_s": 300.0} for n in CORE}  # run with --no-perturb: no share to name
    assert "perturbed" not in totals_line({"findings": findings}, list(CORE))


def test_the_header_says_which_findings_were_continued_and_the_readme_intro_ships_no_machine_path(tmp_path):
    """A finding whose record adds several sessions is named under the sessions (their wall time covers only
    part of it); the README's intro writes the report command as a report ships it (no absolute path)."""
    from normlab.study.findings_report.header import header_lines
    from normlab.study.findings_report.overview import readme_intro

    timings = {
        "findings": {"xiong_warmup": {"wall_s": 60.0, "sessions": 3}, "xiong_grad_profile": {"wall_s": 9.0}}
    }
    text = "\n".join(
        header_lines({**timings, "sessions": []}, ["xiong_grad_profile", "xiong_warmup"], [], None)
    )
    assert "Continued from earlier sessions that stopped before they ended (xiong_warmup)" in text
    single = {"findings": {"xiong_warmup": {"wall_s": 60.0}}, "sessions": []}
    assert "Continued" not in "\n".join(header_lines(single, ["xiong_warmup"], [], None))
    command = "python scripts/reproduce.py --from-existing --out /somewhere/machine/round3 --readme README.md"
    intro = readme_intro(tmp_path / "docs" / "REPORT.md", tmp_path / "README.md", command, "")
    assert "/somewhere" not in intro and "--out round3" in intro
