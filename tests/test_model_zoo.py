"""torchvision's architectures and ARES's VGG5 as staged backbones (sflsim.models.zoo,
sflsim.models.vgg5), and the page that lists every model's stages
(docs/reference/models.md)."""

from __future__ import annotations

import copy
import functools
import re
import typing
from pathlib import Path

import pydantic
import pytest
import torch
import torchvision
from torch import nn

from sflsim.config import validate_scenario
from sflsim.config.schema import ModelConfig
from sflsim.models import MODELS, zoo
from sflsim.models.prompts import PromptPrepend, PromptTokens
from sflsim.models.vit import VIT_B16, vit
from sflsim.runner import run_scenario

#: the models built from torchvision's own builders
TORCHVISION = ["resnet34", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
               "shufflenet_v2_x1_0", "vgg11"]
NEW = [*TORCHVISION, "vit_b_16", "vgg5"]
STAGES = {"resnet34": 5, "resnet50": 5, "mobilenet_v2": 5, "mobilenet_v3_small": 5,
          "efficientnet_b0": 5, "shufflenet_v2_x1_0": 4, "vgg11": 5, "vit_b_16": 13, "vgg5": 6}
#: (in_channels, image side): CIFAR and Fashion-MNIST
INPUTS = [(3, 32), (1, 28)]
PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "models.md"


@functools.cache
def built(name: str, in_channels: int, side: int):
    """A backbone from seed 0, its stages and head in eval mode (shared: tests only read it)."""
    b = MODELS[name](in_channels=in_channels, image_size=side, num_classes=10, seed=0)
    b.stages.eval()
    b.head.eval()
    return b


def chained(backbone, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        for stage in backbone.stages:
            x = stage(x)
        return backbone.head(x)


def first_conv(module: nn.Module) -> tuple[str, nn.Conv2d]:
    return next((n, m) for n, m in module.named_modules() if isinstance(m, nn.Conv2d))


def torchvision_model(name: str, backbone, seed: int, in_channels: int, side: int) -> nn.Module:
    """torchvision's own model from ``seed``, with the backbone's documented deviations:
    its first conv (when in_channels != 3) and ceil-mode pools (VGG under 32x32)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ref = getattr(torchvision.models, name)(weights=None, num_classes=10)
    if in_channels != 3:
        path, _ = first_conv(ref)
        parent, _, leaf = path.rpartition(".")
        setattr(ref.get_submodule(parent), leaf, copy.deepcopy(first_conv(backbone.stages[0])[1]))
    for m in ref.modules():
        if isinstance(m, nn.MaxPool2d) and name == "vgg11":
            m.ceil_mode = side < 32
    return ref.eval()


@pytest.mark.parametrize("in_channels, side", INPUTS, ids=["3x32", "1x28"])
@pytest.mark.parametrize("name", TORCHVISION)
def test_stages_and_head_compute_torchvisions_forward(name, in_channels, side):
    """Same seed, same input, eval mode: the logits equal torchvision's bit for bit, and
    every weight but a replaced first conv is the one torchvision draws."""
    backbone = MODELS[name](in_channels=in_channels, image_size=side, num_classes=10, seed=3)
    backbone.stages.eval()
    backbone.head.eval()
    ref = torchvision_model(name, backbone, 3, in_channels, side)
    ours = [p for m in (backbone.stages, backbone.head) for p in m.parameters()]
    assert sum(p.numel() for p in ours) == sum(p.numel() for p in ref.parameters())
    x = torch.randn(2, in_channels, side, side, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = ref(x)
    assert torch.equal(chained(backbone, x), expected)


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                                  "shufflenet_v2_x1_0"])
def test_at_224_and_three_channels_the_model_is_torchvisions(name):
    backbone = MODELS[name](in_channels=3, image_size=224, num_classes=10, seed=0)
    backbone.stages.eval()
    backbone.head.eval()
    ref = torchvision_model(name, backbone, 0, 3, 224)
    assert [t.shape for t in ref.state_dict().values()] == [
        t.shape for m in (backbone.stages, backbone.head) for t in m.state_dict().values()]
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(chained(backbone, x), ref(x))


def test_building_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    MODELS["mobilenet_v3_small"](in_channels=1, image_size=28, num_classes=10, seed=5)
    MODELS["vgg5"](in_channels=1, image_size=28, num_classes=10, seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_vgg11_pools_are_torchvisions_from_32_pixels():
    assert all(not m.ceil_mode for m in built("vgg11", 3, 32).stages.modules()
               if isinstance(m, nn.MaxPool2d))
    assert all(m.ceil_mode for m in built("vgg11", 1, 28).stages.modules()
               if isinstance(m, nn.MaxPool2d))


def test_vit_b_16_is_sflsims_vit_at_vit_b16_sizes():
    ours = built("vit_b_16", 3, 32)
    assert ours.name == "vit_b_16" and ours.stage_channels == [768] * 13
    assert ours.prompt_insertion is PromptPrepend
    ref = vit(in_channels=3, image_size=32, num_classes=10, seed=0, **VIT_B16)
    ref.stages.eval()
    ref.head.eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(chained(ours, x), chained(ref, x))
    client = ours.client_model(2, PromptTokens(3, 768))
    with torch.no_grad():
        assert client.eval()(x).shape == (2, 1 + 3 + 4, 768)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        MODELS["vit_b_16"](in_channels=1, image_size=28, num_classes=10)


def test_vgg5_is_ares_vgg5():
    """ARES's seven layers (RES-Things configurations.py): 32-64-64 convs with
    BatchNorm, pools after the first two, linear 4096->128 then 128->10, no ReLU
    between the two linear layers; 582,346 parameters at 3x32x32."""
    b = built("vgg5", 3, 32)
    kinds = [[type(m).__name__ for m in s] for s in [*b.stages, b.head]]
    assert kinds == [["Conv2d", "BatchNorm2d", "ReLU"], ["MaxPool2d"],
                     ["Conv2d", "BatchNorm2d", "ReLU"], ["MaxPool2d"],
                     ["Conv2d", "BatchNorm2d", "ReLU"], ["Flatten", "Linear", "Unflatten"],
                     ["Flatten", "Linear"]]
    assert (b.stages[5][1].in_features, b.head[1].in_features) == (4096, 128)
    assert built("vgg5", 1, 28).stages[5][1].in_features == 64 * 7 * 7
    assert sum(p.numel() for m in (b.stages, b.head) for p in m.parameters()) == 582_346
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():  # the two linear layers back to back, as in ARES's forward
        h = x
        for stage in b.stages[:5]:
            h = stage(h)
        expected = b.head[1](b.stages[5][1](h.view(2, -1)))
    assert torch.equal(chained(b, x), expected)


@pytest.mark.parametrize("in_channels, side", INPUTS, ids=["3x32", "1x28"])
@pytest.mark.parametrize("name", NEW)
def test_cut_layers_split_and_recombine(name, in_channels, side):
    """Valid end layers are 1..L-1; at each, client + server models give the whole
    model's output, the stage outputs have ``stage_channels`` channels, and the exit
    head gives logits."""
    if name == "vit_b_16" and side % 16:
        pytest.skip("ViT-B/16 needs a multiple of 16 pixels")
    b = built(name, in_channels, side)
    assert b.num_stages == STAGES[name]
    for bad in (0, b.num_stages):
        valid = ("valid end layer: 1" if b.num_stages == 2
                 else f"valid end layers: 1 to {b.num_stages - 1}")
        with pytest.raises(ValueError, match=f"{valid}$"):
            b.check_end_layer(bad)
    x = torch.randn(2, in_channels, side, side, generator=torch.Generator().manual_seed(0))
    whole = chained(b, x)
    # VGG-11's output layer holds 123M parameters: split it once, not at every cut
    ends = [2] if name == "vgg11" else range(1, b.num_stages)
    with torch.no_grad():
        for end in ends:
            h = b.client_model(end).eval()(x)
            assert h.shape[2 if name == "vit_b_16" else 1] == b.stage_output_dim(end)
            assert b.exit_head(end)(h).shape == (2, 10)
            assert torch.equal(b.server_model(end).eval()(h), whole)
        h = x
        for k, stage in enumerate(b.stages, start=1):
            h = stage(h)
            assert h.shape[2 if name == "vit_b_16" else 1] == b.stage_channels[k - 1]
            if k < b.num_stages:
                assert b.exit_head(k)(h).shape == (2, 10)


@pytest.mark.parametrize("name", zoo.FIXED_WIDTH)
def test_a_width_without_a_multiplier_is_refused(name):
    with pytest.raises(ValueError, match=rf"model\.width: 0\.5 is not valid with model\.name "
                                         rf"{name}, which has no width multiplier; valid: 1\.0, or "
                                         r"a model with one: efficientnet_b0, "
                                         r"hetero_splitee_resnet, mobilenet_v2"):
        MODELS[name](in_channels=3, image_size=32, num_classes=10, width=0.5)
    with pytest.raises(pydantic.ValidationError, match=r"model\.width: 0\.5 is not valid with "):
        ModelConfig(name=name, width=0.5)
    assert ModelConfig(name=name).width == 1.0


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                                  "vit_b_16"])
def test_width_scales_where_the_builder_has_a_multiplier(name):
    def params(width):
        b = MODELS[name](in_channels=3, image_size=32, num_classes=10, width=width)
        b.stages.eval()
        b.head.eval()
        return sum(p.numel() for m in (b.stages, b.head) for p in m.parameters()), b

    (full, _), (half, b) = params(1.0), params(0.5)
    assert half < full
    assert chained(b, torch.zeros(1, 3, 32, 32)).shape == (1, 10)


def test_efficientnet_width_path_is_the_builders_at_width_one():
    """Other widths use torchvision's EfficientNet-B0 configuration directly; at 1.0 it
    draws the builder's model."""
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        setting, last = _efficientnet_conf("efficientnet_b0", width_mult=1.0, depth_mult=1.0)
        direct = EfficientNet(setting, 0.2, last_channel=last, num_classes=10)
    b = built("efficientnet_b0", 3, 32)
    ours = [t for m in (b.stages, b.head) for t in m.state_dict().values()]
    assert all(torch.equal(a, c) for a, c in zip(direct.state_dict().values(), ours, strict=True))


def test_names_widths_and_stage_counts_agree_with_the_config():
    names = typing.get_args(ModelConfig.model_fields["name"].annotation)
    assert set(names) == set(MODELS)
    assert set(ModelConfig.FIXED_WIDTH) == set(zoo.FIXED_WIDTH)
    assert set(zoo.WIDTH_MODELS) == set(MODELS) - set(zoo.FIXED_WIDTH)


@pytest.mark.parametrize("name", NEW)
def test_the_loader_counts_the_stages(name):
    """``sflsim validate`` counts a model's stages before building it (for the cut layers)."""
    from sflsim.config.resolve import num_stages

    assert num_stages(ModelConfig(name=name)) == STAGES[name]


def test_a_zoo_model_runs_a_timing_only_scenario(tiny):
    """The name works end to end: validated, built, costed and timed (no training)."""
    tiny["model"] = {"name": "mobilenet_v2", "width": 0.25}
    for group, end in zip(tiny["devices"].values(), (1, 2, 4)):
        group["end_layer"] = end
    tiny["training"]["timing_only"] = True
    result = run_scenario(validate_scenario(tiny))
    last = result.rounds.iloc[-1]
    assert last["round"] == 1 and last["sim_time_s"] > 0 and last["client_flops"] > 0


# ---------------------------------------------------------------- docs/reference/models.md

#: the input the page states
DOC_INPUT = (3, 32)


def _layers(module: nn.Module) -> str:
    """``Conv2d, BatchNorm2d, ReLU`` or ``3 × BasicBlock``: the module's children by type
    (plain Sequentials opened), runs of one type counted."""
    def leaves(m):
        for child in m.children():
            if type(child) is nn.Sequential:
                yield from leaves(child)
            else:
                yield type(child).__name__

    runs: list[list] = []
    for kind in leaves(module) if type(module) is nn.Sequential else [type(module).__name__]:
        if runs and runs[-1][0] == kind:
            runs[-1][1] += 1
        else:
            runs.append([kind, 1])
    return ", ".join(kind if n == 1 else f"{n} × {kind}" for kind, n in runs)


def model_table(name: str) -> str:
    """The page's table of ``name``: one row per stage (a run of identical stages in one
    row), then the output layer, at :data:`DOC_INPUT` with 10 classes."""
    b = built(name, *DOC_INPUT)
    rows: list[list] = []
    h = torch.zeros(1, DOC_INPUT[0], DOC_INPUT[1], DOC_INPUT[1])
    with torch.no_grad():
        for k, piece in enumerate([*b.stages, b.head], start=1):
            h = piece(h)
            cells = [_layers(piece), "×".join(map(str, h.shape[1:])),
                     sum(p.numel() for p in piece.parameters())]
            if rows and rows[-1][1:] == cells and k <= b.num_stages:
                rows[-1][0][1] = k
            else:
                rows.append([[k, k], *cells])
    lines = ["| stage | layers | output | parameters |", "|---|---|---|---|"]
    for (first, last), layers, shape, params in rows:
        if first > b.num_stages:
            stage = "output layer"
        else:
            stage = str(first) if first == last else f"{first}–{last}"
        each = " each" if last > first else ""
        lines.append(f"| {stage} | {layers} | {shape} | {params:,}{each} |")
    return "\n".join(lines)


def summary_table() -> str:
    lines = ["| model | stages | cut layers | width multiplier | parameters |",
             "|---|---|---|---|---|"]
    for name in typing.get_args(ModelConfig.model_fields["name"].annotation):
        b = built(name, *DOC_INPUT)
        params = sum(p.numel() for m in (b.stages, b.head) for p in m.parameters())
        width = "no (1.0 only)" if name in zoo.FIXED_WIDTH else "yes"
        cuts = "1" if b.num_stages == 2 else f"1 to {b.num_stages - 1}"
        lines.append(f"| [`{name}`](#{name}) | {b.num_stages} | {cuts} | {width} | {params:,} |")
    return "\n".join(lines)


def test_the_models_page_shows_every_model_as_the_registry_builds_it():
    """Every table of docs/reference/models.md is the one the registry gives; on a
    change, paste the expected table printed here."""
    page = PAGE.read_text()
    expected = {"summary": summary_table()}
    expected |= {name: model_table(name) for name in MODELS}
    wrong = {k: v for k, v in expected.items() if v not in page}
    assert not wrong, "\n\n".join(f"{k}:\n{v}" for k, v in wrong.items())
    sections = re.findall(r"^## `(\w+)`", page, flags=re.M)
    assert sorted(sections) == sorted(MODELS)


def test_fuse_clients_refuses_a_model_whose_layers_cannot_fuse_before_training(tiny, tmp_path):
    """One line naming training.fuse_clients and the layer, not a traceback mid-run; a
    model whose client-side layers fuse still runs."""
    from sflsim.config import validate_scenario
    from sflsim.errors import ConfigError
    from sflsim.runner import run_scenario

    tiny["devices"] = {"a": {"profile": "rpi4", "count": 2, "end_layer": 2, "link": "wifi"}}
    tiny["training"].update(fuse_clients=True, rounds=1)
    tiny["algorithm"] = {"name": "hetero_splitee_sequential"}
    tiny["model"] = {"name": "mobilenet_v3_small", "width": 0.25}
    with pytest.raises(ConfigError, match="training.fuse_clients: model mobilenet_v3_small "
                                          "cannot be fused.*Conv2dNormActivation"):
        run_scenario(validate_scenario(tiny), tmp_path / "refused")
    tiny["model"] = {"name": "resnet34"}
    run_scenario(validate_scenario(tiny), tmp_path / "ran")


def test_a_one_sample_batch_before_a_one_by_one_batchnorm_is_refused_with_a_batch_size(tiny,
                                                                                      tmp_path):
    """torchvision's ResNet-34 on 28x28 images ends at 1x1: a client's last batch of one
    sample would stop the run half-way; it is refused before, naming a batch size that works."""
    from sflsim.config import validate_scenario
    from sflsim.errors import ConfigError
    from sflsim.run.batch_checks import one_value_batchnorm
    from sflsim.runner import run_scenario

    assert one_value_batchnorm(MODELS["resnet34"](in_channels=1, image_size=28, num_classes=10)) \
        == "0.bn1 of stage 5"
    assert one_value_batchnorm(MODELS["resnet18"](in_channels=1, image_size=28, num_classes=10,
                                                  width=0.25)) is None
    tiny["model"] = {"name": "resnet34"}
    tiny["devices"]["strong"]["end_layer"] = 4
    tiny["training"].update(rounds=1, batch_size=79)  # 240 samples, 3 clients: 80 each
    with pytest.raises(ConfigError, match=r"training.batch_size: 79 leaves 3 clients .* "
                                          r"valid: training.batch_size: 80"):
        run_scenario(validate_scenario(tiny), tmp_path / "refused")
