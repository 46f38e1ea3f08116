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
        "--steps=12",
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
    assert result["steps_per_side"] == 12 and result["steps_per_s_on"] > 0 and result["steps_per_s_off"] > 0
    assert len(result["step_s_on"]) == len(result["step_s_off"]) == 12
    # steps 1..12 after one warm-up step: step 10 is the one instrumented step
    assert result["on_steps_by_kind"] == {"plain": 11, "instrumented": 1, "histogram": 0}
    assert result["wall_ratio"] > 0 and result["robust_ratio"] > 0
