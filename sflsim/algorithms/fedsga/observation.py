"""FedSGA's observation ``o = [a, delta, q]`` before each split decision (Alg. 2 line 6): the
alignment ``a`` (eq. 3), the drift ``delta`` (eq. 5) and the prompt change ``q`` (eq. 4) of
the prompt descriptor ``m_i^t`` (eq. 2, §3.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.algorithms.fedsga.harmonizer import pool
from sflsim.algorithms.host_threads import eval_mode
from sflsim.engine import Process
from sflsim.models.prompts import prompt_descriptor


class Observation:
    """The observation pass and the prompt descriptor (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    def observe(self, client: Client, body: nn.Sequential, idx: torch.Tensor, calibrating: bool
                ) -> Process:
        """Observation ``[a, delta, q]`` (eqs. 2-5); in calibration rounds also the probe.
        Timing-only runs simulate the same work and return None."""
        cid, n = client.client_id, len(idx)
        shallow = body[: self._position(self.p1)]
        cost = self.ctx.costs.cost(f"fedsga_client_fwd:l{self.p1}", shallow,
                                   self.ctx.backbone.input_shape, backward=False)
        yield from self.sim.compute(client.actor, "observe", cid, cost.forward_flops * n,
                                    client.flops_per_s)
        if self.ctx.timing_only:  # the same passes and transfers, shapes only; no observation
            h1 = self.meta_tensor((n, *cost.output_shape))
            if self.prompts and self.cfg.descriptor == "before_decision":
                yield from self.describe_prompts(client, shallow, None, None, shape=h1.shape)
            if calibrating and (self.cfg.probe == "shared" or cid in self.adapted):
                yield from self.probe(client, body, h1, None, None)
            return None
        x, y = self.train_batch(idx, None)  # a measurement: not augmented
        prototypes = self.alignment_prototypes
        with torch.no_grad(), eval_mode(shallow, self.server_path(self.p1)):
            h1 = shallow(x)
            pooled = pool(h1)
            if self.phi_s is not None:
                phi = self.phi_s(pooled)
            else:
                phi = self.server_path(self.p1).embed(h1)
            a = float(F.cosine_similarity(phi, prototypes[y], dim=1).mean())
            mean_h = pooled.mean(0)
            delta = float((mean_h - self.prev_mean_h[cid]).norm()) if cid in self.prev_mean_h else 0.0
            self.prev_mean_h[cid] = mean_h
        if self.prompts and self.cfg.descriptor == "before_decision":
            yield from self.describe_prompts(client, shallow, x, y)
        d = self.descriptors[cid]
        q = float((d[-1] - d[-2]).norm()) if len(d) >= 2 else 0.0
        obs = [a, delta, q]
        if calibrating and (self.cfg.probe == "shared" or cid in self.adapted):
            s = yield from self.probe(client, body, h1, x, y)
            self.calibration.append((obs, self.r_prev[cid], s))
            self.fit_estimator()
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
        cid, timing = client.client_id, self.ctx.timing_only
        if timing:
            n, interface = shape[0], tuple(shape[1:])
        else:
            tokens = self.prompts[cid].tokens
            # torch work in blocks between the yields: another process may train a module
            # shared with this one while this one waits, so no mode may stay switched
            with torch.enable_grad(), eval_mode(shallow):
                h1 = shallow(x)  # (B, ...) with its graph back to the prompts
            n, interface = len(y), tuple(h1.shape[1:])
        payload = self.payload_bytes(interface, n)
        yield from client.uplink.transfer("send_activations", cid, payload)
        server = self.server_path(self.p1)
        flops = self.ctx.costs.cost(f"server:l{self.p1}", server, interface,
                                    input_requires_grad=True).train_flops(n)
        lock = self.server_lock if self.sequential else self.server_locks[cid]
        yield from self.run_on_server("describe_prompts", cid, flops, lock)
        if not timing:  # before any other process resumes: still the slot's work
            with torch.enable_grad(), eval_mode(server):
                h = h1.detach().requires_grad_()
                (grad_h,) = torch.autograd.grad(self.loss_fn(server(h), y), h)
        yield from client.downlink.transfer("send_gradients", cid, payload)
        cost = self.ctx.costs.cost(f"fedsga_client_fwd:l{self.p1}", shallow,
                                   self.ctx.backbone.input_shape, backward=False)
        yield from self.sim.compute(client.actor, "describe_prompts", cid,
                                    cost.forward_flops * 2 * n, client.flops_per_s)
        if timing:
            return
        (grad,) = torch.autograd.grad(h1, tokens, grad_outputs=grad_h)
        self.descriptors[cid].append(prompt_descriptor(tokens.detach(), grad, self.cfg.tau_m))
