"""FedSGA's observation ``o = [a, delta, q]`` before each split decision (Alg. 2 line 6): the
alignment ``a`` (eq. 3), the drift ``delta`` (eq. 5) and the prompt change ``q`` (eq. 4) of
the prompt descriptor ``m_i^t`` (eq. 2, §3.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.algorithms.fedsga.harmonizer import pool
from sflsim.algorithms.fedsga.probes import CalibrationProbes
from sflsim.engine import Process
from sflsim.execution.host_threads import eval_mode
from sflsim.models.prompts import prompt_descriptor

if TYPE_CHECKING:
    from sflsim.algorithms.fedsga.state import FedSGAState


class Observation:
    """The observation pass and the prompt descriptor (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`, its ``observation``).

    Given the algorithm it observes for (:class:`~sflsim.algorithms.fedsga.state.FedSGAState`:
    its client bodies, server paths and locks, prompts and estimator; composition by
    reference, as a SimPy process keeps its environment) and the calibration probes.

    Attributes:
        prev_mean_h: ``{client_id: its last observation's mean pooled p_1 interface}`` (eq. 5).
        descriptors: ``{client_id: its prompt descriptors m_i^t so far}`` (eq. 2).
        last_prompt_grad: ``descriptor: after_training``: ``{client_id: the prompt gradient
            of its last training step}``.
    """

    def __init__(self, fedsga: FedSGAState, probes: CalibrationProbes):
        self.fedsga = fedsga
        self.probes = probes
        self.prev_mean_h: dict[int, torch.Tensor] = {}
        self.descriptors: dict[int, list[torch.Tensor]] = {
            c.client_id: [] for c in fedsga.ctx.clients}
        self.last_prompt_grad: dict[int, torch.Tensor] = {}

    def observe(self, client: Client, body: nn.Sequential, idx: torch.Tensor, calibrating: bool
                ) -> Process:
        """Observation ``[a, delta, q]`` (eqs. 2-5); in calibration rounds also the probe.
        Timing-only runs simulate the same work and return None."""
        alg = self.fedsga
        cid, n = client.client_id, len(idx)
        shallow = body[: alg._position(alg.p1)]
        cost = alg.ctx.costs.cost(f"fedsga_client_fwd:l{alg.p1}", shallow,
                                  alg.ctx.backbone.input_shape, backward=False)
        yield from alg.sim.compute(client.actor, "observe", cid, cost.forward_flops * n,
                                   client.flops_per_s)
        if alg.ctx.timing_only:  # the same passes and transfers, shapes only; no observation
            h1 = alg.cost_model.meta_tensor((n, *cost.output_shape))
            if alg.prompts and alg.cfg.descriptor == "before_decision":
                yield from self.describe_prompts(client, shallow, None, None, shape=h1.shape)
            if calibrating and (alg.cfg.probe == "shared" or cid in alg.adapted):
                yield from self.probes.probe(client, body, h1, None, None)
            return None
        x, y = alg.steps.train_batch(idx, None)  # a measurement: not augmented
        prototypes = alg.class_prototypes.alignment
        with torch.no_grad(), eval_mode(shallow, alg.server_side.path(alg.p1)):
            h1 = shallow(x)
            pooled = pool(h1)
            if alg.server_side.phi_s is not None:
                phi = alg.server_side.phi_s(pooled)
            else:
                phi = alg.server_side.path(alg.p1).embed(h1)
            a = float(F.cosine_similarity(phi, prototypes[y], dim=1).mean())
            mean_h = pooled.mean(0)
            delta = float((mean_h - self.prev_mean_h[cid]).norm()) if cid in self.prev_mean_h else 0.0
            self.prev_mean_h[cid] = mean_h
        if alg.prompts and alg.cfg.descriptor == "before_decision":
            yield from self.describe_prompts(client, shallow, x, y)
        d = self.descriptors[cid]
        q = float((d[-1] - d[-2]).norm()) if len(d) >= 2 else 0.0
        obs = [a, delta, q]
        if calibrating and (alg.cfg.probe == "shared" or cid in alg.adapted):
            s = yield from self.probes.probe(client, body, h1, x, y)
            alg.sufficiency.add(obs, cid, s)
        return obs

    def describe_prompts(self, client: Client, shallow: nn.Sequential, x: torch.Tensor | None,
                         y: torch.Tensor | None, *, shape: torch.Size | None = None) -> Process:
        """Alg. 2 line 6: ``m_i^t`` (eq. 2) from the prompt gradient of the training loss on
        the observation batch: the ``p_1`` interface goes up, the server runs the shared
        path forward and backward (no update), the interface gradient comes down and the
        client backpropagates to its prompts; each part charged. Nothing moves.

        Args:
            x, y: the observation batch ``(B, C, H, W)``, ``(B,)``; None in timing-only
                runs, which give ``shape``, the interface's ``(B, ...)``, and simulate the
                same work with no torch step.
        """
        alg = self.fedsga
        cid, timing = client.client_id, alg.ctx.timing_only
        if timing:
            n, interface = shape[0], tuple(shape[1:])
        else:
            tokens = alg.prompts[cid].tokens
            # torch work in blocks between the yields: another process may train a module
            # shared with this one while this one waits, so no mode may stay switched
            with torch.enable_grad(), eval_mode(shallow):
                h1 = shallow(x)  # (B, ...) with its graph back to the prompts
            n, interface = len(y), tuple(h1.shape[1:])
        payload = alg.cost_model.payload_bytes(interface, n)
        yield from client.uplink.transfer("send_activations", cid, payload)
        server = alg.server_side.path(alg.p1)
        flops = alg.ctx.costs.cost(f"server:l{alg.p1}", server, interface,
                                   input_requires_grad=True).train_flops(n)
        lock = alg.server_side.lock_of(cid)
        yield from alg.steps.run_on_server("describe_prompts", cid, flops, lock)
        if not timing:  # before any other process resumes: still the slot's work
            with torch.enable_grad(), eval_mode(server):
                h = h1.detach().requires_grad_()
                (grad_h,) = torch.autograd.grad(alg.steps.loss_fn(server(h), y), h)
        yield from client.downlink.transfer("send_gradients", cid, payload)
        cost = alg.ctx.costs.cost(f"fedsga_client_fwd:l{alg.p1}", shallow,
                                  alg.ctx.backbone.input_shape, backward=False)
        yield from alg.sim.compute(client.actor, "describe_prompts", cid,
                                   cost.forward_flops * 2 * n, client.flops_per_s)
        if timing:
            return
        (grad,) = torch.autograd.grad(h1, tokens, grad_outputs=grad_h)
        self.descriptors[cid].append(prompt_descriptor(tokens.detach(), grad, alg.cfg.tau_m))
