"""scripts/bench_overhead.py runs end to end (tiny settings; the real measurement takes minutes)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_overhead_script_runs_and_reports_the_ratio(repo_root, tmp_path):
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable,
        "scripts/bench_overhead.py",
        "--blocks=2",
        "--block-steps=10",
        "--warmup-steps=1",
        f"--json={out}",
        "model=tiny",
        "depth=2",
        "data.vocab_size=256",
        "train.batch_size=2",
        "train.seq_len=8",
    ]
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio (time on / time off)" in proc.stdout
    result = json.loads(out.read_text())
    assert result["steps_per_side"] == 20 and result["steps_per_s_on"] > 0 and result["steps_per_s_off"] > 0
    assert len(result["block_times_on"]) == len(result["block_times_off"]) == 2
