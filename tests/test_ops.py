"""Per-operator counts (sflsim.models.ops.count_ops) and exact grouped-convolution FLOPs
(sflsim.models.cost.count_flops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.vision_transformer import EncoderBlock

from sflsim.models import ops as ops_module
from sflsim.models.cost import count_flops, piece_key
from sflsim.models.oplist import OP_CLASSES, OpList, PieceOps
from sflsim.models.ops import count_ops


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("SFLSIM_CACHE_DIR", "off")


def class_flops(ops: OpList, name: str) -> float:
    return float(ops.flops_per_sample[ops.op_class == OP_CLASSES.index(name)].sum())


C_IN, C_OUT, SIDE = 8, 16, 10


@pytest.mark.parametrize("groups", [1, 2, 4, C_IN])
@pytest.mark.parametrize("input_grad", [False, True])
def test_grouped_and_depthwise_conv_flops_are_exact(groups, input_grad):
    """Forward 2 * C_out * H_out * W_out * (C_in / groups) * kh * kw per sample, and the
    same again for the input gradient (when needed) and for the weight gradient, through
    both counters; torch's own counter counts the weight gradient `groups` times over."""
    conv = nn.Conv2d(C_IN, C_OUT, 3, stride=2, padding=1, groups=groups)  # 10x10 -> 5x5
    forward = 2 * C_OUT * 5 * 5 * (C_IN // groups) * 3 * 3
    backward = forward * (1 + input_grad)

    cost = count_flops(conv, (C_IN, SIDE, SIDE), input_requires_grad=input_grad)
    assert (cost.forward_flops, cost.backward_flops) == (forward, backward)

    counted = count_ops(conv, (C_IN, SIDE, SIDE), input_requires_grad=input_grad)
    kind = "conv" if groups == 1 else "grouped_conv"
    other = "grouped_conv" if groups == 1 else "conv"
    assert class_flops(counted.forward, kind) == forward
    assert class_flops(counted.backward, kind) == backward
    assert class_flops(counted.forward, other) == class_flops(counted.backward, other) == 0
    assert counted.forward.names == ("aten.convolution.default",)
    assert counted.backward.names == ("aten.convolution_backward.default",)

    # torch's formula: the same forward, and a weight gradient `groups` times too many
    x = torch.empty(2, C_IN, SIDE, SIDE, device="meta", requires_grad=True)
    meta = nn.Conv2d(C_IN, C_OUT, 3, stride=2, padding=1, groups=groups, device="meta")
    with FlopCounterMode(display=False) as torch_count:
        out = meta(x.clone() if input_grad else x.detach())
    assert torch_count.get_total_flops() == 2 * forward
    with FlopCounterMode(display=False) as torch_count:
        out.backward(torch.ones_like(out))
    assert torch_count.get_total_flops() == 2 * (forward * input_grad + forward * groups)


@pytest.mark.parametrize("groups", [1, 4])
def test_grouped_transposed_conv_flops_are_exact(groups):
    """A transposed convolution: 2 * H_in * W_in * C_in * (C_out / groups) * kh * kw."""
    conv = nn.ConvTranspose2d(C_IN, C_OUT, 3, stride=2, groups=groups)
    forward = 2 * SIDE * SIDE * C_IN * (C_OUT // groups) * 3 * 3
    cost = count_flops(conv, (C_IN, SIDE, SIDE), input_requires_grad=True)
    assert (cost.forward_flops, cost.backward_flops) == (forward, 2 * forward)
    counted = count_ops(conv, (C_IN, SIDE, SIDE), input_requires_grad=True)
    kind = "conv" if groups == 1 else "grouped_conv"
    assert class_flops(counted.forward, kind) == forward
    assert class_flops(counted.backward, kind) == 2 * forward


def test_depthwise_backward_is_one_forward_not_a_dense_one():
    """The case torch gets wrong by 48x: 3x3 depthwise, 96 channels, 112x112."""
    dw = nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False)
    cost = count_flops(dw, (96, 112, 112))
    assert cost.forward_flops == 2 * 96 * 112 * 112 * 9
    assert cost.backward_flops == cost.forward_flops


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


T, D, HEADS, MLP = 7, 24, 4, 48
ATTENTION = 2 * T * D * 3 * D + 2 * T * T * D + 2 * T * T * D + 2 * T * D * D


@pytest.mark.parametrize("piece, extra", [(Attention(D, HEADS), 0),
                                          (EncoderBlock(HEADS, D, MLP, 0.0, 0.0),
                                           2 * (2 * T * D * MLP))],
                         ids=["multihead_attention", "encoder_block"])
def test_attention_matmul_flops(piece, extra):
    """QKV projections, scores, attention x V and the output projection (and an encoder
    block's MLP) by hand; the backward of every product is two products when the input
    needs its gradient."""
    counted = count_ops(piece, (T, D), input_requires_grad=True)
    assert class_flops(counted.forward, "matmul") == ATTENTION + extra
    assert class_flops(counted.backward, "matmul") == 2 * (ATTENTION + extra)
    assert class_flops(counted.forward, "conv") == class_flops(counted.forward,
                                                               "grouped_conv") == 0
    assert count_flops(piece, (T, D)).forward_flops == ATTENTION + extra


def test_linear_bytes_split_into_per_sample_and_fixed():
    """(B*128 + 128*64 + 64 + B*64) * 4 bytes: input, weight, bias, output; the weight's
    transpose (a view) is no operator."""
    counted = count_ops(nn.Linear(128, 64), (128,))
    forward = counted.forward
    assert forward.names == ("aten.addmm.default",)
    assert forward.bytes_per_sample[0] == (128 + 64) * 4
    assert forward.bytes_fixed[0] == (128 * 64 + 64) * 4
    for batch in (1, 3, 32):
        assert forward.bytes(batch)[0] == (batch * 128 + 128 * 64 + 64 + batch * 64) * 4
    assert forward.flops_per_sample[0] == 2 * 128 * 64 and forward.flops_fixed[0] == 0
    # backward without the input's gradient: weight gradient (mm) and bias gradient (sum)
    backward = counted.backward
    assert backward.names == ("aten.mm.default", "aten.sum.dim_IntList")
    assert backward.flops_per_sample.tolist() == [2 * 128 * 64, 64]
    assert backward.bytes_per_sample.tolist() == [(64 + 128) * 4, 64 * 4]
    assert backward.bytes_fixed.tolist() == [128 * 64 * 4, 64 * 4]
    assert (counted.params, counted.param_tensors, counted.output_shape) == (128 * 64 + 64,
                                                                             2, (64,))


class Views(nn.Module):
    def forward(self, x):  # (C, H, W) -> only views
        y = x.transpose(1, 2).permute(0, 2, 1, 3).unsqueeze(1).squeeze(1)
        return y.flatten(1).view(x.shape[0], -1, 2)[:, 1:].unsqueeze(-1).expand(-1, -1, -1, 3)


def test_views_are_no_operators():
    counted = count_ops(Views(), (4, 5, 6), input_requires_grad=False)
    assert len(counted.forward) == 0 and len(counted.backward) == 0
    counted = count_ops(nn.Flatten(), (4, 5, 6), input_requires_grad=True)
    assert len(counted.forward) == 0 and len(counted.backward) == 0
    # next to real work: a linear layer between views adds its own operators only
    piece = nn.Sequential(nn.Flatten(), nn.Linear(120, 8), nn.Unflatten(1, (2, 4)))
    counted = count_ops(piece, (4, 5, 6), input_requires_grad=True)
    assert counted.forward.names == ("aten.addmm.default",)
    assert counted.backward.names == ("aten.mm.default", "aten.mm.default",
                                      "aten.sum.dim_IntList")


def test_batchnorm_relu_piece_is_elementwise_with_positive_bytes():
    """A training step's BatchNorm (batch statistics, running statistics updated) and
    ReLU: elementwise operators only, each moving bytes; the FLOPs are per sample but
    for num_batches_tracked += 1."""
    piece = nn.Sequential(nn.BatchNorm2d(6), nn.ReLU(inplace=True))
    before = piece[0].running_mean.clone()
    counted = count_ops(piece, (6, 8, 8), input_requires_grad=True)
    assert torch.equal(piece[0].running_mean, before)  # the original was not run
    for ops in (counted.forward, counted.backward):
        assert len(ops) >= 2
        assert set(ops.op_class.tolist()) == {OP_CLASSES.index("elementwise")}
        assert (ops.bytes(1) > 0).all()
    forward = counted.forward
    n = 6 * 8 * 8
    assert forward.flops_fixed.sum() == 1  # num_batches_tracked
    relu = forward.names.index("aten.relu_.default")
    assert forward.flops_per_sample[relu] == n
    assert forward.bytes_per_sample[relu] == 2 * n * 4 and forward.bytes_fixed[relu] == 0
    # batch norm reads the input, its affine parameters and running statistics, writes
    # the output, the batch statistics and the running statistics
    norm = next(i for i, name in enumerate(forward.names) if "batch_norm" in name)
    assert forward.bytes_per_sample[norm] == 2 * n * 4
    assert forward.bytes_fixed[norm] == (4 * 6 + 2 * 6 + 2 * 6) * 4


def small_net() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(8, 5))


@pytest.mark.parametrize("input_grad", [False, True])
def test_a_chain_counted_link_by_link_gives_the_whole_count(input_grad):
    piece = small_net()
    whole = ops_module._count_ops_on_meta(piece, (3, 12, 12), backward=True,
                                          input_requires_grad=input_grad)
    assert count_ops(piece, (3, 12, 12), input_requires_grad=input_grad) == whole
    assert whole.backward.names[0] == "aten.mm.default"  # the backward in call order


def test_counts_are_per_sample_times_batch_plus_fixed():
    """The split from batches 2 and 4 predicts the counts at batch 3 exactly."""
    piece = small_net()
    counted = ops_module._count_ops_on_meta(piece, (3, 12, 12), backward=True,
                                            input_requires_grad=True)
    model = ops_module.copy.deepcopy(piece).to("meta").train()
    skip = {id(t) for t in (*model.parameters(), *model.buffers())}
    fwd, bwd, _ = ops_module._record(model, 3, (3, 12, 12), skip, backward=True,
                                     input_requires_grad=True)
    for ops, records in ((counted.forward, fwd), (counted.backward, bwd)):
        assert ops.names == tuple(r[0] for r in records)
        assert ops.pointwise.tolist() == [r[2] for r in records]
        assert ops.flops(3).tolist() == [r[3] for r in records]
        assert ops.bytes(3).tolist() == [r[4] for r in records]


def test_conv_and_matmul_flops_agree_with_count_flops():
    """count_ops's convolution and matrix FLOPs are count_flops's, grouped ones too."""
    piece = small_net()
    for input_grad in (False, True):
        counted = count_ops(piece, (3, 12, 12), input_requires_grad=input_grad)
        cost = count_flops(piece, (3, 12, 12), input_requires_grad=input_grad)
        for ops, flops in ((counted.forward, cost.forward_flops),
                           (counted.backward, cost.backward_flops)):
            assert sum(class_flops(ops, c) for c in ("conv", "grouped_conv", "matmul")) \
                == flops
        assert counted.output_shape == cost.output_shape == (5,)
        assert counted.params == cost.params


def test_nothing_to_train_means_no_backward_and_counts_are_cached():
    frozen = nn.Linear(4, 4).requires_grad_(False)
    counted = count_ops(frozen, (4,))
    assert len(counted.forward) == 1 and len(counted.backward) == 0
    assert counted.param_tensors == 0 and counted.params == 20
    assert len(count_ops(nn.Linear(4, 4), (4,), backward=False).backward) == 0
    assert count_ops(frozen, (4,)) is counted
    key = piece_key(frozen, (4,), backward=True, input_requires_grad=False)
    assert ops_module._COUNTED_OPS[key] is counted


def test_op_list_helpers():
    counted = count_ops(small_net(), (3, 12, 12))
    totals = counted.forward.totals()
    assert sum(t["ops"] for t in totals.values()) == len(counted.forward)
    assert totals["grouped_conv"]["ops"] == 1 and totals["matmul"]["ops"] == 1
    grouped = counted.forward.of_class("grouped_conv")
    assert grouped.names == ("aten.convolution.default",)
    both = OpList.concat([counted.forward, grouped])
    assert len(both) == len(counted.forward) + 1 and OpList.concat([]) == OpList.empty()
    with pytest.raises(ValueError):
        counted.forward.flops_per_sample[0] = 1.0  # read-only: counts are shared
    assert isinstance(counted, PieceOps) and counted.output_shape == (5,)
    assert np.all(counted.forward.flops_per_sample >= 0)


def test_a_piece_returning_no_tensor_is_refused():
    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    with pytest.raises(TypeError, match="not one tensor"):
        count_ops(Pair(), (3,))


@pytest.mark.parametrize("conv, pointwise", [
    (nn.Conv2d(8, 16, 1), True),
    (nn.Conv2d(8, 16, 1, groups=4), True),  # the kernel rule does not look at groups
    (nn.Conv2d(8, 16, 3, padding=1), False),
    (nn.Conv2d(8, 16, 1, stride=2), False),
    (nn.Conv2d(8, 16, (1, 3), padding=(0, 1)), False),
    (nn.Conv2d(8, 16, 3, padding=2, dilation=2), False),
    (nn.ConvTranspose2d(8, 16, 1), False),
])
def test_pointwise_marks_exactly_the_1x1_stride_1_convolutions(conv, pointwise):
    """OpList.pointwise: the convolutions PyTorch's CPU runs sample by sample on one thread
    (1x1 kernel, stride 1, no dilation, not transposed), forward and backward; nothing else."""
    ops = count_ops(nn.Sequential(conv, nn.ReLU()), (8, 6, 6))
    for part in (ops.forward, ops.backward):
        conv_ops = np.array(["convolution" in n for n in part.names])
        assert conv_ops.any()
        assert part.pointwise[conv_ops].tolist() == [pointwise] * int(conv_ops.sum())
        assert not part.pointwise[~conv_ops].any()
