"""Fused K-client steps (sflsim.models.fused) equal the per-client loop."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from sflsim.models import PromptTokens
from sflsim.models.fused import FusedClients, fuse_modules, fused_client_steps
from sflsim.models.resnet import hetero_splitee_resnet
from sflsim.models.resnet18 import resnet18

# channels-last and host threads run CPU kernels that differ between hosts: a crash
# or hang fails these tests (in the isolated tests' one subprocess, see pyproject.toml),
# not the whole pytest run
pytestmark = pytest.mark.isolated(group="host_kernels")

K, B, CLASSES, TOL = 3, 8, 5, 1e-5


def _backbone(name: str):
    if name == "hetero":  # CIFAR stem, six stages
        return hetero_splitee_resnet(in_channels=1, image_size=12, num_classes=CLASSES, width=0.0625)
    return resnet18(in_channels=3, image_size=36, num_classes=CLASSES, width=0.0625)  # max-pool stem


def _optimizer(kind: str, params) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)


def _clients(backbone, end_layer: int, opt: str, k: int = K, dtype=torch.float32):
    """K clients at ``end_layer`` with different weights (so a mix-up would show)."""
    out = []
    for i in range(k):
        model = backbone.client_model(end_layer).to(dtype)
        head = backbone.exit_head(end_layer).to(dtype)
        g = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for p in [*model.parameters(), *head.parameters()]:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        out.append((model, head, _optimizer(opt, [*model.parameters(), *head.parameters()])))
    return out


def _loop_step(model, head, opt, x, y):
    h = model(x)
    loss = nn.functional.cross_entropy(head(h), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return h.detach(), loss.item()


def _assert_same_clients(a, b, tol=TOL):
    for (ma, ha, oa), (mb, hb, ob) in zip(a, b):
        for mod_a, mod_b in ((ma, mb), (ha, hb)):
            for (n, ta), (_, tb) in zip([*mod_a.named_parameters(), *mod_a.named_buffers()],
                                        [*mod_b.named_parameters(), *mod_b.named_buffers()]):
                assert ta.dtype == tb.dtype and ta.shape == tb.shape, n
                torch.testing.assert_close(ta, tb, atol=tol, rtol=tol, msg=n)
        pa = [*ma.parameters(), *ha.parameters()]
        pb = [*mb.parameters(), *hb.parameters()]
        for p, q in zip(pa, pb):
            sa, sb = oa.state[p], ob.state[q]
            assert sa.keys() == sb.keys()
            for key in sa:
                torch.testing.assert_close(sa[key], sb[key], atol=tol, rtol=tol, msg=key)


def _data(backbone, steps: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(steps, K, B, *backbone.input_shape, generator=g, dtype=dtype)
    ys = torch.randint(0, CLASSES, (steps, K, B), generator=g)
    return xs, ys


def _run_and_compare(arch, end_layer, opt, steps, dtype, tol):
    backbone = _backbone(arch)
    loop = _clients(backbone, end_layer, opt, dtype=dtype)
    fused_clients = copy.deepcopy(loop)
    fused = FusedClients(*[list(t) for t in zip(*fused_clients)])
    xs, ys = _data(backbone, steps, dtype=dtype)
    for s in range(steps):
        acts, losses = fused.step(xs[s], ys[s])
        assert len(acts) == K and losses.shape == (K,)
        for k, (model, head, o) in enumerate(loop):
            h, loss = _loop_step(model, head, o, xs[s, k], ys[s, k])
            assert acts[k].shape == h.shape and acts[k].is_contiguous()
            assert not acts[k].requires_grad and acts[k].dtype == dtype
            torch.testing.assert_close(acts[k], h, atol=tol, rtol=tol)
            assert abs(float(losses[k]) - loss) < tol
    fused.write_back()
    _assert_same_clients(loop, fused_clients, tol)
    # the fused copy keeps training after a write-back; a second write-back stays exact
    fused.step(xs[0], ys[0])
    for k, (model, head, o) in enumerate(loop):
        _loop_step(model, head, o, xs[0, k], ys[0, k])
    fused.write_back()
    _assert_same_clients(loop, fused_clients, tol)
    counts = {int(b) for m, _, _ in fused_clients for n, b in m.named_buffers()
              if n.endswith("num_batches_tracked")}
    assert counts == {steps + 1}


@pytest.mark.parametrize("opt", ["adam", "sgd"])
@pytest.mark.parametrize("end_layer", [1, 3, 5])
def test_fused_equals_loop_float32(end_layer, opt):
    """The six-stage ResNet in train mode: parameters, BatchNorm buffers, optimizer
    state, activations and losses within 1e-5 of the per-client loop."""
    _run_and_compare("hetero", end_layer, opt, steps=3, dtype=torch.float32, tol=TOL)


@pytest.mark.parametrize("opt", ["adam", "sgd"])
@pytest.mark.parametrize("arch,end_layer", [("hetero", 1), ("hetero", 3), ("hetero", 5),
                                            ("resnet18", 2), ("resnet18", 4)])
def test_fused_equals_loop_float64(arch, end_layer, opt):
    """In float64 the fused step is the loop's up to ~1e-14: the float32 differences
    are rounding (grouped kernels sum in another order), amplified over many steps by
    BatchNorm on small batches and by Adam on near-zero gradients, not a mix-up."""
    _run_and_compare(arch, end_layer, opt, steps=4, dtype=torch.float64, tol=1e-10)


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_proximal_term_equals_the_loops_penalty(opt):
    """FedProx's term (mu/2)||w_k - a_k||^2 in the fused step: in float64 the loop's
    step with the penalty added to each client's loss, to 1e-10, with a different
    anchor per client (a mix-up would show); losses are the cross-entropy alone, and
    the anchors are left as they were."""
    backbone = _backbone("hetero")
    loop = _clients(backbone, 3, opt, dtype=torch.float64)
    fused_clients = copy.deepcopy(loop)
    anchors = [(copy.deepcopy(m), copy.deepcopy(h)) for m, h, _ in _clients(
        backbone, 3, opt, dtype=torch.float64)[::-1]]  # not the clients' own starting points
    before = [[p.clone() for p in (*m.parameters(), *h.parameters())] for m, h in anchors]
    mu = 0.5
    fused = FusedClients(*[list(t) for t in zip(*fused_clients)],
                         proximal=(mu, [m for m, _ in anchors], [h for _, h in anchors]))
    xs, ys = _data(backbone, steps=3, dtype=torch.float64)
    for s in range(3):
        _, losses = fused.step(xs[s], ys[s])
        for k, ((model, head, o), (am, ah)) in enumerate(zip(loop, anchors)):
            ce = nn.functional.cross_entropy(head(model(xs[s, k])), ys[s, k])
            squares = [(w - a).pow(2).sum() for w, a in zip(
                [*model.parameters(), *head.parameters()], [*am.parameters(), *ah.parameters()])]
            o.zero_grad(set_to_none=True)
            (ce + mu / 2 * torch.stack(squares).sum()).backward()
            o.step()
            assert abs(float(losses[k]) - ce.item()) < 1e-10
    fused.write_back()
    _assert_same_clients(loop, fused_clients, 1e-10)
    # the term moves the weights: one more step with and without it differs
    fused_plain = FusedClients(*[list(t) for t in zip(*copy.deepcopy(loop))])
    fused_plain.step(xs[0], ys[0])
    fused.step(xs[0], ys[0])
    fused_plain.write_back()
    fused.write_back()
    gap = max((p - q).abs().max().item() for p, q in zip(fused.model.parameters(),
                                                          fused_plain.model.parameters()))
    assert gap > 1e-4
    assert all(torch.equal(a, b) for (m, h), was in zip(anchors, before)
               for a, b in zip([*m.parameters(), *h.parameters()], was))


def test_proximal_anchors_must_match_the_clients():
    backbone = _backbone("hetero")
    clients = _clients(backbone, 3, "sgd")
    other = _clients(backbone, 2, "sgd")
    with pytest.raises(ValueError, match="anchors are not K modules structured"):
        FusedClients(*[list(t) for t in zip(*clients)],
                     proximal=(0.1, [m for m, _, _ in other], [h for _, h, _ in other]))


@pytest.mark.parametrize("opt", ["adam", "sgd", "adamw"])
def test_one_shot_steps_equal_loop(opt):
    backbone = _backbone("hetero")
    loop = _clients(backbone, 3, opt)
    fused_clients = copy.deepcopy(loop)
    xs, ys = _data(backbone, steps=3, seed=1)
    for s in range(3):
        models, heads, opts = (list(t) for t in zip(*fused_clients))
        acts, losses = fused_client_steps(models, heads, opts, list(xs[s]), list(ys[s]))
        for k, (model, head, o) in enumerate(loop):
            h, loss = _loop_step(model, head, o, xs[s, k], ys[s, k])
            torch.testing.assert_close(acts[k], h, atol=TOL, rtol=TOL)
            assert abs(losses[k] - loss) < TOL
    _assert_same_clients(loop, fused_clients)


def test_channels_last_equals_loop():
    f64 = torch.float64  # channels-last kernels round differently again; exactness in float64
    backbone = _backbone("hetero")
    loop = _clients(backbone, 5, "adam", dtype=f64)
    fused_clients = copy.deepcopy(loop)
    fused = FusedClients(*[list(t) for t in zip(*fused_clients)], channels_last=True)
    xs, ys = _data(backbone, steps=2, seed=2, dtype=f64)
    for s in range(2):
        acts, _ = fused.step(xs[s], ys[s])
        for k, (model, head, o) in enumerate(loop):
            h, _ = _loop_step(model, head, o, xs[s, k], ys[s, k])
            torch.testing.assert_close(acts[k], h, atol=1e-10, rtol=1e-10)
    fused.write_back()
    _assert_same_clients(loop, fused_clients, 1e-10)


def test_mismatches_raise():
    backbone = _backbone("hetero")
    (m3, h3, o3), = _clients(backbone, 3, "adam", k=1)
    (m4, h4, o4), = _clients(backbone, 4, "adam", k=1)
    with pytest.raises(ValueError, match="cannot fuse"):
        fuse_modules([m3, m4])
    with pytest.raises(ValueError, match="cannot fuse"):
        FusedClients([m3, m4], [h3, h4], [o3, o4])
    clients = _clients(backbone, 3, "adam", k=2)
    models, heads, opts = (list(t) for t in zip(*clients))
    x = torch.randn(B, *backbone.input_shape)
    y = torch.zeros(B, dtype=torch.long)
    with pytest.raises(ValueError, match="same shape"):
        fused_client_steps(models, heads, opts, [x, x[:-1]], [y, y[:-1]])
    with pytest.raises(ValueError, match="one per client"):
        fused_client_steps(models, heads, opts, [x], [y])
    # Adam clients that took different numbers of steps cannot share one Adam
    _loop_step(models[0], heads[0], opts[0], x, y)
    with pytest.raises(ValueError, match="optimizer state"):
        FusedClients(models, heads, opts)
    # different hyper-parameters
    clients = _clients(backbone, 3, "adam", k=2)
    models, heads, opts = (list(t) for t in zip(*clients))
    opts[1].param_groups[0]["lr"] = 0.5
    with pytest.raises(ValueError, match="hyper-parameters"):
        FusedClients(models, heads, opts)
    # unsupported modules (prompt injection) are refused by name
    prompted = [backbone.client_model(2, PromptTokens(2, backbone.prompt_dim)) for _ in range(2)]
    with pytest.raises(ValueError, match="PromptInjection"):
        fuse_modules(prompted)
    with pytest.raises(ValueError, match="type Dropout"):
        fuse_modules([nn.Dropout(), nn.Dropout()])


def test_refresh_hyperparameters_follows_the_clients():
    backbone = _backbone("hetero")
    clients = _clients(backbone, 1, "adam")
    fused = FusedClients(*[list(t) for t in zip(*clients)])
    for _, _, o in clients:
        o.param_groups[0]["lr"] = 5e-4  # as a scheduler would
    fused.refresh_hyperparameters()
    assert fused.optimizer.param_groups[0]["lr"] == 5e-4
    clients[0][2].param_groups[0]["lr"] = 1.0
    with pytest.raises(ValueError, match="hyper-parameters differ"):
        fused.refresh_hyperparameters()
