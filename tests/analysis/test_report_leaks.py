"""Reports that leak nothing (issue 29, finding 4, and compare.py's part of finding 10): text from run
directories shows as text in report.md and report.html, only the report's own files are embedded, configs
are read without running their resolvers, and one run whose config does not parse does not sink the report."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

from normlab.analysis import load_runs, write_report
from normlab.analysis.escape import md_text
from normlab.analysis.html import markdown_to_html

ROOT = Path(__file__).resolve().parents[2]
SECRET = "wandb-key-0123456789abcdef"


def edit_config(run: Path, change) -> None:
    path = run / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config))


def crafted(fresh_sweep, secret_file: Path) -> Path:
    """The main fabricated sweep, received from someone who put markup, a local file and an environment
    variable into it."""
    runs = sorted(p for p in fresh_sweep.path.iterdir() if p.is_dir())
    image = f"x ![leak]({secret_file})"
    for run in runs:
        edit_config(run, lambda c: c.update(experiment_name=image))
        edit_config(run, lambda c: c["train"].update(sample_prompt="${oc.env:WANDB_API_KEY}"))
    # a variant label (norm=…) and an invalid run's reason with markup in them
    edit_config(runs[0], lambda c: c["norm"].update(name="ln ![x](/etc/hostname) <b>bold</b>"))
    invalid = next(r for r in runs if json.loads((r / "summary.json").read_text())["status"] == "invalid")
    summary = json.loads((invalid / "summary.json").read_text())
    summary["reason"] = f"bad [link]({secret_file}) and **stars**"
    (invalid / "summary.json").write_text(json.dumps(summary))
    return fresh_sweep.path


def rendered_text(markdown: str) -> str:
    """What a reader sees of report.md: the text of its rendering, links and images included."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    out = []
    for token in tokens:
        for child in token.children or []:
            if child.type == "image":
                out.append("<IMAGE>")
            if child.type == "link_open":
                out.append("<LINK>")
            if child.type == "text":
                out.append(child.content)
    return "".join(out)


def test_text_from_run_directories_is_text_and_no_local_file_is_embedded(fresh_sweep, tmp_path, monkeypatch):
    secret_file = tmp_path / "outside" / "hostname"
    secret_file.parent.mkdir()
    secret_file.write_text("the-host-name-only-this-machine-knows\n")
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    sweep = crafted(fresh_sweep, secret_file)
    rs = load_runs(sweep)
    out = tmp_path / "report"
    report = write_report(rs, out)
    markdown = report.path.read_text()
    page = report.html.read_text()
    encoded = base64.b64encode(secret_file.read_bytes()).decode()
    assert encoded not in page and "the-host-name" not in page  # the file was never read into the page
    host = Path("/etc/hostname")
    if host.is_file() and host.stat().st_size:
        assert base64.b64encode(host.read_bytes()).decode() not in page
    seen = rendered_text(markdown)
    assert f"x ![leak]({secret_file})" in seen  # the title reads as written
    assert "bad [link](" in seen and "**stars**" in seen  # the reason, as written
    assert "![x](/etc/hostname) <b>bold</b>" in seen  # the variant label, as written
    images = [line for line in markdown.splitlines() if line.startswith("![")]
    assert images and all(line.split("](")[1].rstrip(")").endswith(".png") for line in images)  # only ours
    assert "<b>" not in page  # raw HTML from a run directory shown as text, never as markup


def test_a_config_is_read_without_running_its_resolvers(fresh_sweep, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    sweep = crafted(fresh_sweep, tmp_path / "nothing")
    rs = load_runs(sweep)
    assert set(rs.runs["train.sample_prompt"]) == {"${oc.env:WANDB_API_KEY}"}  # shown as written
    assert rs.runs["train.seq_len"].iloc[0] == 64  # a reference to another key is still followed
    out = tmp_path / "report"
    write_report(rs, out)
    for f in out.iterdir():
        assert SECRET not in f.read_text(errors="replace"), f.name
    # the notebook's loader is load_runs: the same frame


def test_the_html_embeds_only_files_inside_the_reports_folder(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    (report / "fig.png").write_bytes(b"\x89PNG-ours")
    (tmp_path / "secret.txt").write_text("outside")
    (report / "link.png").symlink_to(tmp_path / "secret.txt")
    text = "![a](fig.png) ![b](../secret.txt) ![c](link.png) ![d](" + str(tmp_path / "secret.txt") + ")"
    page = markdown_to_html(text, report)
    assert base64.b64encode(b"\x89PNG-ours").decode() in page
    assert base64.b64encode(b"outside").decode() not in page


def test_md_text_shows_markup_as_text():
    import html

    for text in (
        "x ![leak](/etc/hostname)",
        "a|b",
        "*em* _u_ `c` <b>&amp;",
        "0_ln-pre-L2",
        "# head #",
        "a\\b",
    ):
        rendered = MarkdownIt("commonmark").renderInline(md_text(text))
        assert rendered == html.escape(text, quote=False), (text, rendered)
    assert md_text("0_ln-pre-L2-w0-s0") == "0_ln-pre-L2-w0-s0"  # names stay readable in report.md


def test_one_run_whose_config_does_not_parse_does_not_sink_the_report(fresh_sweep, tmp_path):
    runs = sorted(p for p in fresh_sweep.path.iterdir() if p.is_dir())
    (runs[1] / ".hydra" / "config.yaml").write_text("model: [unclosed\n")
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare.py"), str(fresh_sweep.path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    markdown = (out / "report.md").read_text()
    assert f"{md_text(runs[1].name)}: .hydra/config.yaml cannot be read" in markdown
    assert len(load_runs(fresh_sweep.path).runs) == len(runs)  # the run is still there


def test_runs_with_a_hole_in_their_rows_are_flagged(fresh_sweep, tmp_path):
    run = sorted(p for p in fresh_sweep.path.iterdir() if p.is_dir())[0]
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if not 5 <= r["step"] <= 9))
    rs = load_runs(fresh_sweep.path)
    assert rs.runs.loc[run.name, "rows_missing"] == 5
    assert any("no rows for steps 5–9 (5 steps)" in w for w in rs.warnings)
    markdown = write_report(rs, tmp_path / "report").path.read_text()
    read_first = markdown.split("## Summary")[0]
    assert "have steps without a row in metrics.jsonl" in read_first and md_text(run.name) in read_first
