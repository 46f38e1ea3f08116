"""The benchmark scripts run end to end and report what they promise (tiny settings; the real measurements
take minutes). Nothing here asserts a timing: the numbers only have to exist and be consistent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # each starts Python processes and trains a few steps


def run(repo_root, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline"}
    proc = subprocess.run(
        [sys.executable, *args], cwd=repo_root, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


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
        "data.vocab_size=260",
        "train.batch_size=2",
        "train.seq_len=8",
        "metrics.dense_until=5",
    ]
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ratio (time on / time off)" in proc.stdout
    result = json.loads(out.read_text())
    assert result["steps_per_side"] == 12 and result["steps_per_s_on"] > 0 and result["steps_per_s_off"] > 0
    assert len(result["step_s_on"]) == len(result["step_s_off"]) == 12
    # steps 1..12 after one warm-up step: 1–5 (the dense start) and 10 are instrumented, as the trainer does
    assert result["on_steps_by_kind"] == {"plain": 6, "instrumented": 6, "histogram": 0}
    assert result["wall_ratio"] > 0 and result["robust_ratio"] > 0


TINY_SHAPE = ["model=tiny", "depth=2", "data.vocab_size=300", "train.batch_size=2", "train.seq_len=16"]


def test_loop_benchmark_against_the_in_repo_stand_in(repo_root, tmp_path):
    out = tmp_path / "loop.json"
    args = ["--blocks=2", "--block-steps=10", "--warmup-steps=1", f"--json={out}", *TINY_SHAPE]
    proc = run(repo_root, "scripts/bench_loop.py", *args)
    assert "speed ratio normlab / stand-in" in proc.stdout and "load average" in proc.stdout
    result = json.loads(out.read_text())
    assert result["other"] == "stand-in" and len(result["block_ratios"]) == 2
    assert result["ratio"] == pytest.approx(
        sorted(result["block_ratios"])[0] / 2 + sorted(result["block_ratios"])[1] / 2
    )
    assert len(result["block_s"]["normlab"]) == len(result["block_s"]["stand-in"]) == 2


def fake_nanogpt(tmp_path):
    """A folder whose model.py has nanoGPT's interface (GPT, GPTConfig, configure_optimizers)."""
    checkout = tmp_path / "nanoGPT"
    checkout.mkdir()
    (checkout / "model.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            import torch
            from torch import nn
            from torch.nn import functional as F

            CALLS = []

            @dataclass
            class GPTConfig:
                block_size: int = 8
                vocab_size: int = 10
                n_layer: int = 1
                n_head: int = 1
                n_embd: int = 4
                dropout: float = 0.0
                bias: bool = True

            class GPT(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.emb = nn.Embedding(config.vocab_size, config.n_embd)
                    self.head = nn.Linear(config.n_embd, config.vocab_size, bias=config.bias)

                def forward(self, idx, targets=None):
                    logits = self.head(self.emb(idx))
                    return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

                def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
                    print(f"configure_optimizers called for {device_type}")
                    return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas)
            """
        )
    )
    return checkout


def test_loop_benchmark_imports_a_nanogpt_checkout(repo_root, tmp_path):
    """--nanogpt PATH imports GPT, GPTConfig and configure_optimizers from PATH/model.py and drives them
    as nanoGPT's train.py does. Here PATH holds a minimal model with nanoGPT's interface."""
    checkout = fake_nanogpt(tmp_path)
    out = tmp_path / "loop.json"
    args = ["--blocks=2", "--block-steps=10", "--warmup-steps=1", f"--nanogpt={checkout}", f"--json={out}"]
    proc = run(repo_root, "scripts/bench_loop.py", *args, *TINY_SHAPE)
    assert "configure_optimizers called for cpu" in proc.stdout
    assert "speed ratio normlab / nanogpt" in proc.stdout
    assert json.loads(out.read_text())["nanogpt"] == str(checkout)


def test_gpu_benchmark_runs_its_table_on_the_cpu(repo_root, tmp_path):
    """The GPU benchmark's code path, on the CPU at a tiny shape: four sides, a table with the ratio to
    nanoGPT, the steady-state overhead and the breakdown of an instrumented step."""
    checkout = fake_nanogpt(tmp_path)
    out = tmp_path / "gpu.json"
    args = ["--device=cpu", "--shape=tiny", "--precision=fp32", "--no-compile", f"--nanogpt={checkout}"]
    args += ["--warmup-rounds=2", "--rounds=2", "--breakdown", "--repeats=1", f"--json={out}"]
    proc = run(repo_root, "scripts/bench_gpu.py", *args)
    assert "| normlab instrumented (default metrics) |" in proc.stdout
    assert "configure_optimizers called for cpu" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["sides"]) == {"nanogpt", "bare", "instrumented", "eager"}
    assert result["sides"]["nanogpt"]["vs_nanogpt"] == 1.0
    assert all(len(blocks) == 4 for blocks in result["block_s"].values())
    assert {
        "probed forward + backward",
        "embedding effective rank",
        "attention max logits (every block)",
    } <= set(result["breakdown_ms"])
    assert "overhead" in result and "dense_start_s" in result


def test_loop_benchmark_refuses_a_folder_without_model_py(repo_root, tmp_path):
    proc = subprocess.run(
        [sys.executable, "scripts/bench_loop.py", f"--nanogpt={tmp_path}"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "no model.py" in proc.stderr


def test_startup_benchmark_reports_the_fixed_cost(repo_root, tmp_path, cache_dir):
    out = tmp_path / "startup.json"
    args = ["--rounds=1", f"--json={out}", "model=tiny", "depth=1", "data.n_train_stories=200"]
    args += [
        "data.n_val_stories=20",
        "data.vocab_size=300",
        "train.batch_size=2",
        f"data.cache_dir={cache_dir}",
    ]
    proc = run(repo_root, "scripts/bench_startup.py", *args)
    assert "beyond `import torch`" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["median_s"]) == {
        "import torch",
        "import torch._dynamo",
        "import normlab.cli",
        "max_steps=0",
    }
    assert all(len(v) == 1 for v in result["times_s"].values())


def test_norm_op_benchmark_reports_both_norms_per_shape(repo_root, tmp_path):
    out = tmp_path / "norm.json"
    args = ["--shape=2x4x8", "--shape=1x3x16", "--blocks=2", "--reps=2", f"--json={out}"]
    proc = run(repo_root, "scripts/bench_norm_op.py", *args)
    assert proc.stdout.count("per forward + backward") == 2 and "median of 2 block pairs" in proc.stdout
    results = json.loads(out.read_text())
    assert [r["shape"] for r in results] == [[2, 4, 8], [1, 3, 16]]
    for r in results:
        assert r["rms_us"] > 0 and r["ln_us"] > 0 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
    bad = subprocess.run(
        [sys.executable, "scripts/bench_norm_op.py", "--shape=32x128"],
        cwd=repo_root,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "BATCHxTOKENSxWIDTH" in bad.stderr


def test_embedding_rank_benchmark_times_both_routes(repo_root):
    proc = run(repo_root, "scripts/bench_embedding_rank.py", "--presets=tiny", "--repeats=2", "--threads=1")
    assert "by the Gram route" in proc.stdout and "by the SVD" in proc.stdout and "of a step" in proc.stdout


TINY_STACK = ["model=tiny", "depth=1", "data.vocab_size=260", "train.seq_len=8", "data.n_train_stories=200"]


def test_stack_benchmark_in_process_reports_the_ratio(repo_root, tmp_path):
    out = tmp_path / "stack.json"
    run(
        repo_root,
        "scripts/bench_stack.py",
        "--in-process",
        "--members=2",
        "--batch=2",
        "--repeats=2",
        "--block-steps=3",
        f"--json={out}",
        *TINY_STACK,
    )
    result = json.loads(out.read_text())
    assert (
        result["ratio"] > 0
        and result["alone_tokens_per_cpu_s"] > 0
        and result["stacked_tokens_per_cpu_s"] > 0
    )


def test_stack_benchmark_runs_every_mode_as_a_sweep(repo_root, tmp_path):
    """The sweep modes on the CPU, with the path --device cuda takes (every mode a real `-m` sweep)."""
    out = tmp_path / "stack.json"
    proc = run(
        repo_root,
        "scripts/bench_stack.py",
        "--members=2",
        "--steps=3",
        "--batch=2",
        "--alone-runs=1",
        "--stacked-jobs=1",
        f"--json={out}",
        *TINY_STACK,
        "metrics.dense_until=0",
    )
    assert "| stacked n_jobs=1 | 2 |" in proc.stdout and "vs one alone" in proc.stdout
    table = {row["mode"]: row for row in json.loads(out.read_text())["table"]}
    assert set(table) == {"one at a time", "joblib n_jobs=2", "stacked n_jobs=1"}
    assert table["one at a time"]["ratio"] == 1.0 and table["stacked n_jobs=1"]["tokens_per_s"] > 0


def test_norm_share_script_writes_what_finding_5_reads(repo_root, tmp_path, cache_dir):
    """scripts/bench_norm_share.py on the CPU (the code a GPU runs): the JSON finding 5 reads as
    norm_share.json — device, LayerNorm's norm share per repetition, ABBA log ratios."""
    out = tmp_path / "norm_share.json"
    args = [
        "--device=cpu",
        "--reps=2",
        "--steps=1",
        "--threads=1",
        f"--json={out}",
        "depth=2",
        f"data.cache_dir={cache_dir}",
    ]
    proc = run(repo_root, "scripts/bench_norm_share.py", *args)
    assert "of its step" in proc.stdout and "log(t_LN / t_RMS)" in proc.stdout
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and len(result["share"]) == 2 and len(result["log_ratio"]) == 2
    assert all(0 < s < 1 for s in result["share"])


def test_stack_host_benchmark_holds_the_host_work_goal(repo_root, tmp_path):
    """Issue 36, in CI size: a stacked step's host work — its Python and torch operator calls, counted, so
    that a busy machine cannot move them — does not grow with the members (operator calls: a stack of 32
    dispatches what a stack of 8 does) and stays within the goal against a run alone (32 members ≤ 2×, 8 ≤
    1.3×) on both head paths; its CPU time (which includes the members' arithmetic) stays far below the 17.5×
    a 32-member step took before."""
    out = tmp_path / "host.json"
    proc = run(
        repo_root,
        "scripts/bench_stack.py",
        "--host",
        "--members=8,32",
        "--blocks=1",
        "--block-steps=4",
        f"--json={out}",
    )
    assert "| fused | stack of 32 |" in proc.stdout and "| plain | stack of 8 |" in proc.stdout
    rows = {
        (r["head"], r["members"]): r for r in json.loads(out.read_text())["rows"] if r["batch_times"] == 1
    }
    for head in ("fused", "plain"):
        assert rows[(head, 32)]["ops_per_step"] <= rows[(head, 8)]["ops_per_step"] + 2
        assert rows[(head, 32)]["calls_ratio"] <= 2.0, rows[(head, 32)]
        assert rows[(head, 8)]["calls_ratio"] <= 1.3, rows[(head, 8)]
        assert rows[(head, 32)]["ratio"] < 8.0, rows[(head, 32)]
    # one run alone with the 32-member stack's tokens, and the stack against it
    wide = [r for r in json.loads(out.read_text())["rows"] if r["batch_times"] == 32]
    assert {r["head"] for r in wide} == {"fused", "plain"} and all(r["members"] == 0 for r in wide)
    assert all(rows[(h, 32)]["same_tokens_ratio"] > 0 for h in ("fused", "plain"))
    assert "batch × 32 (a stack of 32's tokens)" in proc.stdout


def test_gpu_checks_stack_part_runs_dry_on_the_cpu(repo_root, tmp_path):
    """scripts/gpu_checks.sh's stack part, on the CPU at a tiny size: every mode a sweep, the table printed
    as each mode ends, its JSON written (what the GPU call runs, with its sizes)."""
    env = {
        **os.environ,
        "PARTS": "stack",
        "DEVICE": "cpu",
        "OUT": str(tmp_path),
        "STACK_MEMBERS": "2",
        "STACK_STEPS": "2",
        "STACK_JOBLIB": "2",
        "STACK_MODES": "alone,stacked,joblib",
        "T_MODE": "300",
        "T_STACK": "900",
    }
    proc = subprocess.run(
        ["bash", "scripts/gpu_checks.sh"],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("| mode | runs | wall (s) |") == 3  # the table after each mode
    table = {row["mode"]: row for row in json.loads((tmp_path / "stack_gpu.json").read_text())["table"]}
    assert set(table) == {"one at a time", "stacked n_jobs=1", "joblib n_jobs=2"}
    assert all(row["tokens_per_s"] > 0 for row in table.values())


def test_stack_profile_picks_each_kind_of_step():
    """Steady steps in a row between two instrumented ones, probed ones without the rank, probed+rank ones
    among the dense steps (metrics.every=10, dense_until=20, rank_every=10: the rank at 0–20 and every 100)."""
    from normlab.bench.stack_profile import kinds_of_steps
    from normlab.metrics.instruments import InstrumentConfig

    metrics = {"every": 10, "dense_until": 20, "rank_every": 10}
    kinds = kinds_of_steps(metrics, 3)
    assert kinds == {"steady": [31, 32, 33, 34], "probed": [30, 40, 50, 60], "probed+rank": [1, 2, 3, 4]}
    cfg = InstrumentConfig.from_config(metrics)
    assert not any(cfg.instrumented(s) for s in kinds["steady"])
    assert all(cfg.instrumented(s) and not cfg.rank(s) for s in kinds["probed"])
    assert all(cfg.rank(s) for s in kinds["probed+rank"])
    assert kinds_of_steps({"every": 50, "dense_until": 4, "rank_every": 2}, 3)["probed"] == [
        50,
        150,
        250,
        350,
    ]
    with pytest.raises(ValueError, match="rank_every"):
        kinds_of_steps({"every": 10, "dense_until": 20, "rank_every": 1}, 3)
    with pytest.raises(ValueError, match="metrics.every"):
        kinds_of_steps({"every": 3, "dense_until": 20}, 3)


def test_gpu_checks_profile_part_runs_dry_on_the_cpu(repo_root, tmp_path):
    """scripts/gpu_checks.sh's profile part (bench_stack.py --profile), on the CPU at a tiny size: a stack of
    2 against a run alone, each kind of step, the top operators with the stack's time beside 2 × the run
    alone's, written to OUT/profile.md (on a GPU: kernels by CUDA time, and the launches per step)."""
    env = {
        **os.environ,
        "PARTS": "profile",
        "DEVICE": "cpu",
        "OUT": str(tmp_path),
        "PROFILE_MEMBERS": "2",
        "PROFILE_BATCH": "2",
        "PROFILE_STEPS": "2",
        "PROFILE_TOP": "6",
        "PROFILE_ARGS": "--model tiny depth=1 data.vocab_size=260 train.seq_len=8 data.n_train_stories=200",
    }
    proc = subprocess.run(
        ["bash", "scripts/gpu_checks.sh"], cwd=repo_root, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "profile.md").read_text()
    for kind in ("steady steps (32, 33)", "probed steps (40, 50)", "probed+rank steps (2, 3)"):
        assert f"### {kind}" in table, table
    assert (
        table.count("| operator | stack ms | calls | 2 × alone ms | alone calls | stack / (2 × alone) |") == 3
    )
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| `aten::")]
    assert len(rows) == 18 and all(float(r[2]) > 0 for r in rows)
    assert "| operator calls |" in table and "| ms (CPU time) |" in table
    assert table.count("| matrix products |") == 3  # the families: a stack's kernels are named otherwise
