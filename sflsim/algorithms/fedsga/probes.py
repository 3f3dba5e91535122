"""FedSGA's calibration probes (§3.3, Alg. 1 lines 1-5): the losses ``L_p1`` and ``L_pref``
of offloading at ``p_1`` and at ``p_ref``, and the sufficiency label
``s = 1[L_p1 <= (1 + beta) L_pref]`` of eq. 7."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from sflsim.algorithms.base import Client
from sflsim.engine import Process
from sflsim.execution.host_threads import eval_mode

if TYPE_CHECKING:
    from sflsim.algorithms.fedsga.state import FedSGAState


class CalibrationProbes:
    """The probe of a calibration round (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`,
    its ``calibration_probes``), given the algorithm it probes for (composition by
    reference).

    Attributes:
        records: ``{(round, client_id): (L_p1, L_pref, s)}`` of every probe (nats; eq. 7's
            label).
    """

    def __init__(self, fedsga: FedSGAState):
        self.fedsga = fedsga
        self.records: dict[tuple[int, int], tuple[float, float, float]] = {}

    def probe(self, client: Client, body: nn.Sequential, h1: torch.Tensor, x: torch.Tensor,
              y: torch.Tensor) -> Process:
        """Alg. 1 lines 1-5: probe losses at ``p_1`` and ``p_ref``; returns the label of eq. 7
        (and keeps both losses in :attr:`records`). Timing-only runs (``h1`` a shape, ``x``
        and ``y`` None) simulate the same work and return None."""
        alg = self.fedsga
        cid, n, timing = client.client_id, len(h1), alg.ctx.timing_only
        if alg.cfg.probe == "adapted" and not timing:
            deeper = alg.adapted[cid]
        else:  # (timing only: stages p_1+1..p_ref as the adapted prefix has them, for costs)
            deeper = body[alg._position(alg.p1): alg._position(alg.p_ref)]
        cost = alg.ctx.costs.cost(f"fedsga_probe:l{alg.p1}-{alg.p_ref}", deeper,
                                  tuple(h1.shape[1:]), backward=False)
        if not alg.fronts:  # client_fronts: local: the client holds its deeper stages
            yield from client.downlink.transfer(
                "download_model", cid, alg.stage_bytes(alg.p1, alg.p_ref))
        yield from alg.sim.compute(client.actor, "calibration_probe", cid,
                                   cost.forward_flops * n, client.flops_per_s)
        if timing:
            h_ref = alg.cost_model.meta_tensor((n, *cost.output_shape))
        else:
            with torch.no_grad(), eval_mode(deeper):
                h_ref = deeper(h1)
        payload = (alg.cost_model.payload_bytes(tuple(h1.shape[1:]), n)
                   + alg.cost_model.payload_bytes(tuple(h_ref.shape[1:]), n))
        yield from client.uplink.transfer("send_probe_activations", cid, payload)
        # sequential: w_s is being trained, one step at a time; per_client: the round's w_s
        # is only read, so probes run in parallel up to the server's slots
        model_lock = alg.server_side.lock_of(cid)
        flops = sum(alg.ctx.costs.cost(f"server:l{p}", alg.server_side.path(p),
                                       tuple(h.shape[1:]), backward=False).forward_flops * n
                    for p, h in ((alg.p1, h1), (alg.p_ref, h_ref)))
        yield from alg.steps.run_on_server("calibration_probe", cid, flops, model_lock)
        if timing:
            return None
        # before any other process resumes: still the slot's work
        path1, path_ref = alg.server_side.path(alg.p1), alg.server_side.path(alg.p_ref)
        with torch.no_grad(), eval_mode(path1, path_ref):
            loss1 = float(alg.steps.loss_fn(path1(h1), y))
            loss_ref = float(alg.steps.loss_fn(path_ref(h_ref), y))
        s = 1.0 if loss1 <= (1 + alg.cfg.beta) * loss_ref else 0.0
        self.records[(alg.round_, cid)] = (loss1, loss_ref, s)
        return s
