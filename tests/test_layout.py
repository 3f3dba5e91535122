"""Channels-last without oneDNN#6035 (:mod:`sflsim.models.layout`), and FLOP counts that do
not depend on the host's kernels or memory layout (:func:`sflsim.models.cost.count_flops`).

The crash needs oneDNN's NHWC 1x1 strided backward-weights kernel with few input
channels; which sizes crash depends on the host's instruction set, so the checks run
in subprocesses under both of oneDNN's x86 kernel sets (``ONEDNN_MAX_CPU_ISA``), at
sizes that crashed or hung on an AMD EPYC before the fix. A crash fails the test,
not pytest.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from torch import nn

from sflsim.models import cost
from sflsim.models.cost import count_flops
from sflsim.models.layout import nchw_only, to_memory_format
from sflsim.models.resnet import hetero_splitee_resnet

#: oneDNN's kernel sets on x86: AVX2 (channel block 8) and AVX-512 (block 16).
ISAS = ["AVX2", "AVX512_CORE"]

GUARDED_STEP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torchvision.models.resnet import BasicBlock, conv1x1
    from sflsim.models.layout import to_memory_format
    torch.set_num_threads(int(sys.argv[1]))

    def block(c):
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(c, c, 3, padding=1),
                             BasicBlock(c, 2 * c, 2, nn.Sequential(conv1x1(c, 2 * c, 2),
                                                                   nn.BatchNorm2d(2 * c))))

    for c in (4, 8):  # fewer input channels than the AVX2 / AVX-512 block
        nhwc, nchw = to_memory_format(block(c), torch.channels_last), block(c)
        x = torch.randn(32, c, 64, 64)
        for _ in range(3):
            nhwc.zero_grad(), nchw.zero_grad()
            nhwc(x.contiguous(memory_format=torch.channels_last)).sum().backward()
            nchw(x).sum().backward()
        for p, q in zip(nhwc.parameters(), nchw.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-3 * q.grad.abs().max()), c
    print("ok")
""")


def _isa_env(isa: str) -> dict:
    return {**os.environ, "ONEDNN_MAX_CPU_ISA": isa}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", [1, 2])
def test_guarded_channels_last_trains_like_nchw(isa, threads):
    result = subprocess.run([sys.executable, "-c", GUARDED_STEP, str(threads)], env=_isa_env(isa),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (
        f"exit {result.returncode} with oneDNN {isa}, {threads} thread(s): {result.stderr[-2000:]}")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_channels_last_run_finishes_on_avx2_kernels(tiny, tmp_path, threads):
    """The issue's scenario: FedAvg, width 1/16, channels-last; it hung (2 threads) or
    aborted inside the FLOP counter (1 thread) on AVX2 kernels."""
    tiny["algorithm"] = {"name": "fedavg"}
    tiny["training"]["channels_last"] = True
    path = tmp_path / "tiny_cl.yaml"
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))
    result = subprocess.run(
        [sys.executable, "-c", "from sflsim.cli.main import app; app()", "run", str(path),
         "-o", str(tmp_path / "run"), "-q", "--threads", str(threads)],
        env=_isa_env("AVX2"), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_only_the_narrow_strided_pointwise_convolutions_stay_nchw():
    narrow = hetero_splitee_resnet(in_channels=1, image_size=28, num_classes=10, width=0.0625)
    picked = [m for m in narrow.stages.modules() if nchw_only(m)]
    # the downsample convolutions of stages 4 and 5 see 4 and 8 channels; stage 6 sees 16
    assert [(m.in_channels, m.stride) for m in picked] == [(4, (2, 2)), (8, (2, 2))]
    wide = hetero_splitee_resnet(in_channels=1, image_size=28, num_classes=10, width=0.25)
    assert not any(nchw_only(m) for m in wide.stages.modules())

    to_memory_format(narrow.stages, torch.channels_last)
    to_memory_format(narrow.stages, torch.channels_last)  # again: no second hook
    seen = []
    for m in picked:
        assert m.weight.is_contiguous() and len(m._forward_pre_hooks) == 1
        m.register_forward_hook(lambda mod, args, out: seen.append(args[0].is_contiguous()))
    others = [m for m in narrow.stages.modules()
              if isinstance(m, nn.Conv2d) and not nchw_only(m) and m.in_channels > 1]
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last) for m in others)
    nn.Sequential(*narrow.stages)(torch.randn(2, 1, 28, 28).contiguous(memory_format=torch.channels_last))
    assert seen == [True, True]  # their input arrived NCHW

    to_memory_format(narrow.stages, torch.contiguous_format)  # back: nothing channels-last
    assert all(p.is_contiguous() for p in narrow.stages.parameters())


def test_flop_counts_do_not_depend_on_the_memory_layout_and_touch_nothing(monkeypatch):
    monkeypatch.setenv("SFLSIM_CACHE_DIR", "off")  # counted here, not read from disk
    backbone = hetero_splitee_resnet(in_channels=1, image_size=28, num_classes=10, width=0.0625)
    model = backbone.client_model(5)
    nchw = count_flops(model, backbone.input_shape, input_requires_grad=True)
    devices = []
    first_conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    first_conv.register_forward_pre_hook(lambda mod, args: devices.append(args[0].device.type))
    before = copy.deepcopy(model.state_dict())
    to_memory_format(model, torch.channels_last)
    cost._COUNTED.clear()  # counted again, not found in the process's counts
    assert count_flops(model, backbone.input_shape, input_requires_grad=True) == nchw
    assert devices == ["meta"]  # counted on shapes: no kernel of this host ran
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert nchw.forward_flops > 0 and nchw.backward_flops > nchw.forward_flops
