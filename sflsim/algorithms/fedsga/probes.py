"""FedSGA's calibration probes (§3.3, Alg. 1 lines 1-5): the losses ``L_p1`` and ``L_pref``
of offloading at ``p_1`` and at ``p_ref``, and the sufficiency label
``s = 1[L_p1 <= (1 + beta) L_pref]`` of eq. 7."""

from __future__ import annotations

import torch
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.algorithms.host_threads import eval_mode
from sflsim.engine import Process


class CalibrationProbes:
    """The probe of a calibration round (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    def probe(self, client: Client, body: nn.Sequential, h1: torch.Tensor, x: torch.Tensor,
              y: torch.Tensor) -> Process:
        """Alg. 1 lines 1-5: probe losses at ``p_1`` and ``p_ref``; returns the label of eq. 7
        (and keeps both losses in :attr:`probes`). Timing-only runs (``h1`` a shape, ``x``
        and ``y`` None) simulate the same work and return None."""
        cid, n, timing = client.client_id, len(h1), self.ctx.timing_only
        if self.cfg.probe == "adapted" and not timing:
            deeper = self.adapted[cid]
        else:  # (timing only: stages p_1+1..p_ref as the adapted prefix has them, for costs)
            deeper = body[self._position(self.p1): self._position(self.p_ref)]
        cost = self.ctx.costs.cost(f"fedsga_probe:l{self.p1}-{self.p_ref}", deeper,
                                   tuple(h1.shape[1:]), backward=False)
        if not self.fronts:  # client_fronts: local: the client holds its deeper stages
            yield from client.downlink.transfer(
                "download_model", cid, self.stage_bytes(self.p1, self.p_ref))
        yield from self.sim.compute(client.actor, "calibration_probe", cid,
                                    cost.forward_flops * n, client.flops_per_s)
        if timing:
            h_ref = self.meta_tensor((n, *cost.output_shape))
        else:
            with torch.no_grad(), eval_mode(deeper):
                h_ref = deeper(h1)
        payload = self.payload_bytes(tuple(h1.shape[1:]), n) + self.payload_bytes(
            tuple(h_ref.shape[1:]), n)
        yield from client.uplink.transfer("send_probe_activations", cid, payload)
        # sequential: w_s is being trained, one step at a time; per_client: the round's w_s
        # is only read, so probes run in parallel up to the server's slots
        model_lock = self.server_lock if self.sequential else self.server_locks[cid]
        flops = sum(self.ctx.costs.cost(f"server:l{p}", self.server_path(p),
                                        tuple(h.shape[1:]), backward=False).forward_flops * n
                    for p, h in ((self.p1, h1), (self.p_ref, h_ref)))
        yield from self.run_on_server("calibration_probe", cid, flops, model_lock)
        if timing:
            return None
        # before any other process resumes: still the slot's work
        path1, path_ref = self.server_path(self.p1), self.server_path(self.p_ref)
        with torch.no_grad(), eval_mode(path1, path_ref):
            loss1 = float(self.loss_fn(path1(h1), y))
            loss_ref = float(self.loss_fn(path_ref(h_ref), y))
        s = 1.0 if loss1 <= (1 + self.cfg.beta) * loss_ref else 0.0
        self.probes[(self.round_, cid)] = (loss1, loss_ref, s)
        return s
