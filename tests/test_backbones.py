"""ResNet-18, ViT, exit heads, prompt tokens and FedSGA eq. 2."""

import inspect
import math

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torchvision.models.vision_transformer import EncoderBlock

from sflsim.config.schema import ModelConfig
from sflsim.models import MODELS
from sflsim.models.cost import count_flops
from sflsim.models.prompts import PromptTokens, prompt_descriptor, prompt_weights
from sflsim.models.vit import VIT_B16, vit

TINY_VIT = dict(patch_size=4, depth=4, hidden_dim=32, heads=2)


@pytest.fixture(scope="module")
def r18():
    return MODELS["resnet18"](in_channels=3, image_size=32, num_classes=10, width=0.125, seed=0)


@pytest.fixture(scope="module")
def tiny_vit():
    return MODELS["vit"](in_channels=1, image_size=16, num_classes=10, seed=0, **TINY_VIT)


def _stage_shapes(backbone, x):
    shapes = []
    for stage in backbone.stages:
        x = stage(x)
        shapes.append(tuple(x.shape[1:]))
    return shapes


def test_resnet18_stages_cifar_stem(r18):
    assert r18.num_stages == 5 and r18.stage_channels == [8, 8, 16, 32, 64]
    assert isinstance(r18.stages[0][3], nn.Identity)
    assert _stage_shapes(r18, torch.randn(2, 3, 32, 32)) == [
        (8, 32, 32), (8, 32, 32), (16, 16, 16), (32, 8, 8), (64, 4, 4)]


def test_resnet18_stages_imagenet_stem():
    b = MODELS["resnet18"](in_channels=3, image_size=64, num_classes=10, width=0.125)
    assert b.stages[0][0].kernel_size == (7, 7) and isinstance(b.stages[0][3], nn.MaxPool2d)
    assert _stage_shapes(b, torch.randn(2, 3, 64, 64)) == [
        (8, 16, 16), (8, 16, 16), (16, 8, 8), (32, 4, 4), (64, 2, 2)]


def test_vit_stage_shapes(tiny_vit):
    assert tiny_vit.num_stages == 5 and tiny_vit.stage_channels == [32] * 5
    assert all(isinstance(s, EncoderBlock) for s in tiny_vit.stages[1:])
    assert _stage_shapes(tiny_vit, torch.randn(2, 1, 16, 16)) == [(17, 32)] * 5


def _whole(backbone):
    return nn.Sequential(*backbone.stages, backbone.head).eval()


@pytest.mark.parametrize("name,end_layer", [*[("r18", e) for e in range(1, 5)],
                                            *[("tiny_vit", e) for e in range(1, 5)]])
def test_split_composes_and_exit_heads(request, name, end_layer):
    backbone = request.getfixturevalue(name)
    c, s = backbone.input_shape[0], backbone.input_shape[1]
    x = torch.randn(2, c, s, s)
    client = backbone.client_model(end_layer).eval()
    server = backbone.server_model(end_layer).eval()
    with torch.no_grad():
        whole = _whole(backbone)(x)
        assert whole.abs().max() > 0
        assert torch.allclose(server(client(x)), whole, atol=1e-5)
        assert backbone.exit_head(end_layer)(client(x)).shape == (2, 10)


def test_vit_exit_head_is_layernorm_cls_linear(tiny_vit):
    head = tiny_vit.exit_head(2)
    assert isinstance(head[0], nn.LayerNorm) and isinstance(head[-1], nn.Linear)
    assert torch.equal(head[-1].weight, tiny_vit.exit_head(2)[-1].weight)
    assert tiny_vit.stage_output_dim(2) == 32


def test_vit_prompts_lengthen_sequence_and_get_gradients(tiny_vit):
    prompts = PromptTokens(4, tiny_vit.prompt_dim, generator=torch.Generator().manual_seed(0))
    client = tiny_vit.client_model(2, prompts=prompts)
    assert isinstance(client[0], type(tiny_vit.stages[0])) and client[1].prompts is prompts
    x = torch.randn(2, 1, 16, 16)
    h = client(x)
    assert h.shape == (2, 1 + 16 + 4, 32)
    out = tiny_vit.server_model(2)(h)
    assert out.shape == (2, 10)
    out.sum().backward()
    assert prompts.tokens.grad is not None and prompts.tokens.grad.abs().min() > 0
    # stage keys are those of the prompt-free client model, plus the private prompts
    plain = set(tiny_vit.client_model(2).state_dict())
    assert set(client.state_dict()) == plain | {"prompts.prompts.tokens"}
    # the prompt tokens sit between CLS and the patches, without positional embedding
    assert torch.equal(client[1](client[0](x))[:, 1:5],
                       prompts.tokens.expand(2, -1, -1))


def test_cnn_prompt_injection_keeps_shapes_and_gets_gradients(r18):
    prompts = PromptTokens(3, r18.prompt_dim)
    client = r18.client_model(2, prompts=prompts)
    h = client(torch.randn(2, 3, 32, 32))
    assert h.shape == r18.client_model(2)(torch.randn(2, 3, 32, 32)).shape
    r18.server_model(2)(h).sum().backward()
    assert prompts.tokens.grad.abs().sum(dim=1).min() > 0


def test_prompt_dim_must_match(r18):
    with pytest.raises(ValueError, match="dimension 5"):
        r18.client_model(1, prompts=PromptTokens(2, 5))


def test_prompt_descriptor_eq2_by_hand():
    eps = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    grads = torch.tensor([[3.0, 5.0], [1.0, -0.5]])  # c = |3|, |-1| = (3, 1)
    alpha = prompt_weights(eps, grads, tau_m=2.0)
    e1 = math.exp(3 / 2)
    e2 = math.exp(1 / 2)
    assert torch.allclose(alpha, torch.tensor([e1, e2]) / (e1 + e2))
    m = prompt_descriptor(eps, grads, tau_m=2.0)
    assert m.shape == (2,)
    assert torch.allclose(m, alpha[0] * eps[0] + alpha[1] * eps[1])
    # low temperature: the most influential token wins
    assert torch.allclose(prompt_descriptor(eps, grads, tau_m=1e-3), eps[0])
    with pytest.raises(ValueError, match="tau_m"):
        prompt_descriptor(eps, grads, tau_m=0.0)


def test_count_flops_on_vit_pieces(tiny_vit):
    cost = count_flops(tiny_vit.stages[1], (17, 32), input_requires_grad=True)
    d, t, mlp = 32, 17, 128
    linear = 2 * t * (4 * d * d + 2 * d * mlp)  # qkv + out projection + MLP
    attention = 2 * 2 * t * t * d  # q k^T and attn v
    assert cost.output_shape == (17, 32) and cost.params > 0
    # FlopCounterMode has no formula for the CPU flash kernel of scaled_dot_product_attention,
    # so attention is missed (torch 2.x) unless count_flops forces the math backend ...
    assert linear <= cost.forward_flops <= linear + attention
    # ... which decomposes attention into counted matmuls
    with sdpa_kernel(SDPBackend.MATH):
        cost = count_flops(tiny_vit.stages[1], (17, 32))
    assert cost.forward_flops == pytest.approx(linear + attention)
    emb = count_flops(tiny_vit.stages[0], (1, 16, 16))
    assert emb.output_shape == (17, 32) and emb.forward_flops == 2 * 16 * 16 * 32
    assert count_flops(tiny_vit.head, (17, 32), backward=False).forward_flops == 2 * 32 * 10


def test_vit_b16_parameter_count():
    with torch.device("meta"):  # shapes only: no 86M-parameter initialisation on the CPU
        b = vit(in_channels=3, image_size=224, num_classes=1000, **VIT_B16)
    params = sum(p.numel() for m in (b.stages, b.head) for p in m.parameters())
    assert params == pytest.approx(86.6e6, rel=0.01)  # torchvision vit_b_16: 86,567,656
    assert b.num_stages == 13 and b.stage_channels[0] == 768


@pytest.mark.parametrize("name,kwargs", [("resnet18", {}), ("vit", TINY_VIT)])
def test_seeded_builders_give_identical_weights(name, kwargs):
    def build(seed):
        return MODELS[name](in_channels=1, image_size=16, num_classes=3, width=0.25, seed=seed,
                            **kwargs)

    a, b, c = build(5), build(5), build(6)
    for pa, pb in zip(a.client_model(2).parameters(), b.client_model(2).parameters()):
        assert torch.equal(pa, pb)
    assert torch.equal(a.exit_head(2)[-1].weight, b.exit_head(2)[-1].weight)
    assert any(not torch.equal(pa, pc)
               for pa, pc in zip(a.stages[0].parameters(), c.stages[0].parameters()))


def test_vit_width_keeps_hidden_dim_a_multiple_of_heads():
    b = vit(in_channels=1, image_size=32, num_classes=2, width=0.0625)  # as config.load counts
    assert b.stage_channels[0] % 3 == 0 and b.num_stages == 7
    assert vit(in_channels=1, image_size=32, num_classes=2, width=0.0625,
               **VIT_B16).stage_channels[0] == 48


def test_bad_hidden_dim_for_heads_raises():
    with pytest.raises(ValueError, match="hidden_dim.*heads"):
        vit(in_channels=1, image_size=16, num_classes=2, hidden_dim=30, heads=4)
    with pytest.raises(ValueError, match="model.hidden_dim.*model.heads"):
        ModelConfig(name="vit", hidden_dim=30, heads=4)
    with pytest.raises(ValueError, match="model.hidden_dim.*model.heads"):
        ModelConfig(name="vit", heads=5)  # against the default hidden_dim 192
    with pytest.raises(ValueError, match="patch_size"):
        vit(in_channels=1, image_size=30, num_classes=2, patch_size=4)


def test_model_config_builder_kwargs():
    assert ModelConfig().builder_kwargs() == {}
    cfg = ModelConfig(name="vit", depth=2, hidden_dim=64, heads=4)
    assert cfg.builder_kwargs() == {"depth": 2, "hidden_dim": 64, "heads": 4}
    with pytest.raises(ValueError, match="only to name: vit"):
        ModelConfig(name="resnet18", depth=3)
    defaults = {k: p.default for k, p in inspect.signature(vit).parameters.items()}
    assert all(defaults[k] == v for k, v in ModelConfig.VIT_DEFAULTS.items())


@pytest.mark.parametrize("name,kwargs", [("resnet18", {}), ("hetero_splitee_resnet", {}),
                                         ("small_cnn", {}), ("vit", TINY_VIT)])
def test_exit_heads_live_where_the_backbone_lives(name, kwargs):
    """The runner moves the backbone to the training device; an exit head built later
    (Centralized builds its own) must be there too, with the weights it has on the CPU.
    The ``meta`` device stands in for a GPU on a CPU-only machine."""
    backbone = MODELS[name](in_channels=1, image_size=16, num_classes=3, width=0.25, seed=0,
                            **kwargs)
    on_cpu = backbone.exit_head(1)
    backbone.stages.to("meta")
    backbone.head.to("meta")
    on_meta = backbone.exit_head(1)
    assert all(p.device.type == "meta" for p in on_meta.parameters())
    assert [p.shape for p in on_meta.parameters()] == [p.shape for p in on_cpu.parameters()]


@pytest.mark.parametrize("name, kwargs", [("hetero_splitee_resnet", {}), ("resnet18", {}),
                                          ("small_cnn", {}), ("vit", {}), ("vit", {"depth": 2})])
def test_stage_counts_known_without_torch_match_the_builders(name, kwargs):
    """The loader counts a built-in backbone's stages without building it (no torch)."""
    from sflsim.config.resolve import num_stages
    from sflsim.config.schema import ModelConfig
    from sflsim.models.registry import MODELS

    config = ModelConfig(name=name, width=0.0625, **kwargs)
    built = MODELS[name](in_channels=1, image_size=32, num_classes=2, width=0.0625,
                         **config.builder_kwargs())
    assert num_stages(config) == built.num_stages
