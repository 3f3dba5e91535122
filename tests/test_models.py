"""Backbone, split, exit heads and FLOP counting."""

import pytest
import torch
from torch import nn

from sflsim.models import MODELS
from sflsim.models.cost import CostTable, count_flops


def test_linear_flops_are_flops_not_macs():
    cost = count_flops(nn.Linear(128, 64, bias=False), (128,), backward=False)
    assert cost.forward_flops == 16_384


def test_backward_flops_about_twice_forward_for_conv():
    cost = count_flops(nn.Conv2d(4, 8, 3, padding=1), (4, 8, 8), input_requires_grad=True)
    assert cost.backward_flops == pytest.approx(2 * cost.forward_flops)
    # no gradient w.r.t. the input: only the weight gradient
    cost = count_flops(nn.Conv2d(4, 8, 3, padding=1), (4, 8, 8))
    assert cost.backward_flops == pytest.approx(cost.forward_flops)


def test_cost_table_caches_and_does_not_touch_bn_stats():
    bn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    before = bn[1].running_mean.clone()
    table = CostTable()
    a = table.cost("k", bn, (1, 6, 6))
    assert table.cost("k", bn, (1, 6, 6)) is a
    assert torch.equal(bn[1].running_mean, before)


@pytest.fixture(scope="module")
def backbone():
    return MODELS["hetero_splitee_resnet"](in_channels=1, image_size=28, num_classes=10,
                                           width=0.25, seed=0)


def test_table_i_stages(backbone):
    assert backbone.num_stages == 6
    assert backbone.stage_channels == [16, 16, 16, 32, 64, 128]
    x = torch.randn(2, 1, 28, 28)
    sizes = []
    for stage in backbone.stages:
        x = stage(x)
        sizes.append(tuple(x.shape[1:]))
    assert sizes == [(16, 28, 28), (16, 28, 28), (16, 28, 28), (32, 14, 14), (64, 7, 7),
                     (128, 4, 4)]


def test_large_input_stem_uses_7x7_and_maxpool():
    b = MODELS["hetero_splitee_resnet"](in_channels=3, image_size=96, num_classes=10, width=0.125)
    assert b.stages[0][0].kernel_size == (7, 7)
    assert isinstance(b.stages[0][3], nn.MaxPool2d)
    assert tuple(b.stages[0](torch.randn(1, 3, 96, 96)).shape) == (1, 8, 24, 24)


@pytest.mark.parametrize("end_layer", [1, 2, 3, 4, 5])
def test_split_composes_to_whole_network(backbone, end_layer):
    x = torch.randn(2, 1, 28, 28)
    client, server = backbone.client_model(end_layer), backbone.server_model(end_layer)
    whole = nn.Sequential(*backbone.stages, backbone.head).eval()
    client.eval(), server.eval()
    assert torch.allclose(server(client(x)), whole(x), atol=1e-5)
    assert backbone.exit_head(end_layer)(client(x)).shape == (2, 10)


def test_same_seed_same_weights_and_exit_heads(backbone):
    other = MODELS["hetero_splitee_resnet"](in_channels=1, image_size=28, num_classes=10,
                                            width=0.25, seed=0)
    for a, b in zip(backbone.client_model(5).parameters(), other.client_model(5).parameters()):
        assert torch.equal(a, b)
    assert torch.equal(backbone.exit_head(3)[2].weight, other.exit_head(3)[2].weight)
    different = MODELS["hetero_splitee_resnet"](in_channels=1, image_size=28, num_classes=10,
                                                width=0.25, seed=1)
    assert not torch.equal(next(different.client_model(1).parameters()),
                           next(backbone.client_model(1).parameters()))


@pytest.mark.parametrize("end_layer", [0, 6, 7])
def test_end_layer_outside_model_raises(backbone, end_layer):
    with pytest.raises(ValueError, match="valid end layers: 1 to 5"):
        backbone.client_model(end_layer)


@pytest.mark.parametrize("name, in_channels, side", [("hetero_splitee_resnet", 1, 28),
                                                      ("vit", 3, 32)])
def test_a_chain_counted_link_by_link_gives_the_whole_count(name, in_channels, side):
    """count_flops adds up the children of an nn.Sequential (each counted once per
    process); the sum is what counting the whole chain at once gives, with and without
    the input gradient, forward only or with backward."""
    from sflsim.models.cost import _count_on_meta

    bb = MODELS[name](in_channels=in_channels, image_size=side, num_classes=10, width=0.125,
                      seed=0)
    shape = (in_channels, side, side)
    for k in (1, bb.num_stages - 1):
        client = nn.Sequential(bb.client_model(k), bb.exit_head(k))
        h = _count_on_meta(bb.client_model(k), shape, backward=False,
                           input_requires_grad=False).output_shape
        for piece, x in ((client, shape), (bb.server_model(k), h)):
            for backward, input_grad in ((True, False), (True, True), (False, False)):
                whole = _count_on_meta(piece, x, backward=backward, input_requires_grad=input_grad)
                assert count_flops(piece, x, backward=backward,
                                   input_requires_grad=input_grad) == whole, (k, backward)


def test_pieces_that_differ_only_in_a_plain_attribute_are_counted_apart():
    """The process-wide count cache keys a piece by its plain attributes too: a forward
    may read one that repr does not show."""

    class Repeat(nn.Module):
        def __init__(self, times: int):
            super().__init__()
            self.times, self.linear = times, nn.Linear(8, 8, bias=False)

        def forward(self, x):
            for _ in range(self.times):
                x = self.linear(x)
            return x

    once, twice = count_flops(Repeat(1), (8,)), count_flops(Repeat(2), (8,))
    assert twice.forward_flops == 2 * once.forward_flops == 2 * 128


def test_counts_are_read_back_from_disk_by_a_later_process(tmp_path, monkeypatch):
    """A count written to the disk cache is what a later process (here: an empty process
    cache and a fresh reader) gets without counting; a line that does not parse is
    skipped; with SFLSIM_CACHE_DIR=off nothing is read or written; a piece whose source file changed is
    counted again."""
    from sflsim.models import cost as cost_module

    monkeypatch.setenv("SFLSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cost_module, "_COUNTED", {})
    monkeypatch.setattr(cost_module, "DISK_COUNTS", cost_module.DiskCounts())
    piece = nn.Conv2d(3, 5, 3)
    counted = count_flops(piece, (3, 9, 9))
    file = tmp_path / cost_module.DiskCounts.FILE
    assert len(file.read_text().splitlines()) == 1
    file.write_text("not json\n" + file.read_text())

    def refuse(*args, **kwargs):
        raise AssertionError("counted again")

    monkeypatch.setattr(cost_module, "_COUNTED", {})
    monkeypatch.setattr(cost_module, "DISK_COUNTS", cost_module.DiskCounts())
    monkeypatch.setattr(cost_module, "_count_on_meta", refuse)
    assert count_flops(nn.Conv2d(3, 5, 3), (3, 9, 9)) == counted
    with pytest.raises(AssertionError, match="counted again"):  # another input shape
        count_flops(nn.Conv2d(3, 5, 3), (3, 11, 11))

    import sys

    conv_file = sys.modules[nn.Conv2d.__module__].__file__  # as if its source had changed
    cost_module.DISK_COUNTS._digests[conv_file] = "edited"
    monkeypatch.setattr(cost_module, "_COUNTED", {})
    with pytest.raises(AssertionError, match="counted again"):
        count_flops(nn.Conv2d(3, 5, 3), (3, 9, 9))
    del cost_module.DISK_COUNTS._digests[conv_file]
    monkeypatch.setenv("SFLSIM_CACHE_DIR", "off")
    monkeypatch.setattr(cost_module, "_COUNTED", {})
    with pytest.raises(AssertionError, match="counted again"):
        count_flops(nn.Conv2d(3, 5, 3), (3, 9, 9))
