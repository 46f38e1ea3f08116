"""Checks that need CUDA; skipped, with the reason, everywhere else (CI and this project's machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TRAIN_PY = str(Path(__file__).parents[1] / "train.py")


def run(tmp_path: Path, cache_dir: Path, *overrides: str, launcher: tuple[str, ...] = ()) -> dict:
    cmd = [*(launcher or (sys.executable,)), TRAIN_PY, "model=tiny", "logger=none", "data=synthetic"]
    cmd += [f"data.cache_dir={cache_dir}", "train.device=cuda", "train.sample_tokens=0", "train.max_steps=30"]
    cmd += [f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_bf16_compiled_run_learns_and_reports_mfu(tmp_path, cache_dir):
    summary = run(tmp_path, cache_dir, "train.precision=bf16", "train.compile=true", "train.peak_flops=1e14")
    assert summary["status"] == "completed"
    assert summary["mfu"] is not None and 0 < summary["mfu"] < 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_torchrun_over_nccl(tmp_path, cache_dir):
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
    summary = run(tmp_path, cache_dir, "train.batch_size=4", launcher=launcher)
    assert summary["world_size"] == 2 and summary["status"] == "completed"


def test_a_steady_compiled_step_never_waits_for_the_device():
    """torch.cuda's sync debug mode raises on any call that blocks the host for the device: none in a
    steady step (forward, backward, per-layer gradient norms, clipping, fused AdamW), instrumentation on."""
    import numpy as np
    from trainers import default_config

    from normlab.model.gpt import GPT
    from normlab.train.loop import Trainer

    tokens = np.random.default_rng(0).integers(0, 4096, 200_000).astype(np.uint16)
    cfg = default_config()
    cfg["train"].update(batch_size=8, seq_len=128, compile=True, precision="bf16")
    cfg["metrics"].update(every=10, dense_until=0)
    torch.manual_seed(0)
    model = GPT(4096, 128, 128, 4, 2, "ln", "pre").cuda()
    trainer = Trainer.from_config(cfg, model, tokens, tokens, torch.device("cuda"))
    for step in range(3):  # compile, then steady steps
        trainer.train_step(update=True, probe=trainer.instruments.begin(step))
        trainer.step += 1
    torch.cuda.synchronize()
    x, y = trainer.batches.draw(tokens, torch.Generator().manual_seed(1))
    trainer.batch = lambda _tokens, _rng: (x, y)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            assert trainer.instruments.begin(trainer.step) is None
            trainer.train_step(update=True)
            trainer.step += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def step_peak_bytes(compiled: bool) -> tuple[int, int]:
    """(peak memory a forward + backward of the plain GPU step adds, bytes of the bf16 logits) for a model
    whose logits dwarf everything else: vocabulary 50304, width 64, one block."""
    from normlab.model.gpt import GPT
    from normlab.train.head_loss import HeadLoss

    torch.manual_seed(0)
    model = GPT(50304, 256, 64, 4, 1, "ln", "pre").cuda()
    head_loss = HeadLoss(model, z_loss=1e-4, fused=False, compiled=compiled, device=torch.device("cuda"))
    x = torch.randint(0, 50304, (8, 256), device="cuda")
    y = torch.randint(0, 50304, (8, 256), device="cuda")
    for _ in range(2):  # compile first
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total, _ = head_loss(x, y)
        total.backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        total, _ = head_loss(x, y)
    total.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    return peak, 8 * 256 * 50304 * 2


def test_the_compiled_step_writes_no_float32_logits():
    """With the objective inside the compiled graph, a step's extra memory stays below three times the
    bf16 logits (the logits and their gradient, 2×, plus a little); the eager path, which writes a float32
    copy (2×) and its log-softmax (2×) beside the bf16 logits, goes above it — so the check can fail."""
    compiled, logits = step_peak_bytes(compiled=True)
    eager, _ = step_peak_bytes(compiled=False)
    assert compiled < 3 * logits, f"compiled step peak {compiled / logits:.2f}× the bf16 logits"
    assert eager >= 3 * logits, f"eager step peak {eager / logits:.2f}× the bf16 logits"
