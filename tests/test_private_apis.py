"""The few private APIs normlab leans on (each use says why): these tests fail loudly when one changes."""

from __future__ import annotations

import torch


def test_foreach_norm_sub_and_mul_behave_as_their_references():
    a = [torch.randn(3, 4), torch.randn(5)]
    b = [torch.randn(3, 4), torch.randn(5)]
    norms = torch._foreach_norm(a)
    assert all(torch.allclose(n, torch.linalg.vector_norm(t)) for n, t in zip(norms, a, strict=True))
    diffs = torch._foreach_sub(a, b)
    assert all(torch.equal(d, x - y) for d, x, y in zip(diffs, a, b, strict=True))
    scaled = [t.clone() for t in a]
    torch._foreach_mul_(scaled, torch.tensor(0.5))
    assert all(torch.allclose(s, t * 0.5) for s, t in zip(scaled, a, strict=True))


def test_log_formatter_still_calls_num_to_string():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from normlab.analysis import plots

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.03, 0.3, 3])
    plots.log_y(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    plt.close(fig)
    assert "0.1" in labels and "1" in labels, labels  # our plain labels, not matplotlib's 10^-1


def test_hub_offline_constants_exist():
    import datasets.config
    import huggingface_hub.constants

    assert isinstance(huggingface_hub.constants.HF_HUB_OFFLINE, bool)
    assert isinstance(datasets.config.HF_HUB_OFFLINE, bool)


def test_submitit_starts_local_controllers_with_its_module_subprocess_popen():
    """normlab.sweeps.submitit starts local submitit jobs in sessions of their own by swapping the
    `subprocess` that submitit's local launcher calls Popen through, while it submits."""
    import inspect

    import submitit.local.local as local

    from normlab.sweeps.submitit import isolated_sessions

    assert "subprocess.Popen(" in inspect.getsource(local.start_controller)
    with isolated_sessions():
        assert local.subprocess.Popen.keywords == {"start_new_session": True}
        assert local.subprocess.PIPE == -1  # everything else is the real module's
    import subprocess

    assert local.subprocess is subprocess


def test_fused_adamw_kernel_is_adamw():
    """normlab.train.stacked.optim calls the kernel torch.optim.AdamW(fused=True) calls, member by member,
    with each member's hyperparameters: it must keep AdamW's signature and arithmetic."""
    g = torch.Generator().manual_seed(0)
    p, grad = torch.randn(5, generator=g), torch.randn(5, generator=g)
    ref = torch.nn.Parameter(p.clone())
    ref.grad = grad.clone()
    opt = torch.optim.AdamW([ref], lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, fused=True)
    opt.step()
    ours, m, v, step = p.clone(), torch.zeros(5), torch.zeros(5), torch.tensor(1.0)
    torch._fused_adamw_(
        [ours],
        [grad],
        [m],
        [v],
        [],
        [step],
        amsgrad=False,
        lr=0.01,
        beta1=0.8,
        beta2=0.9,
        weight_decay=0.1,
        eps=1e-6,
        maximize=False,
    )
    torch.testing.assert_close(ours, ref.detach(), rtol=0, atol=0)
