"""FedSGA's records: the columns of the clients table (the observation of Alg. 2 line 6,
the estimate ``r`` of eq. 6, the probe losses and label of eq. 7) and the client-side
parameters each round trains (stages ``1..p`` and the private prompts of §3.2)."""

from __future__ import annotations

NAN = float("nan")


class DecisionRecords:
    """What each round reports (a part of :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters trained this round: stages ``1..cut`` plus prompts."""
        cut = self.cuts[client_id]
        prompts = self.prompts[client_id].tokens.numel() if self.prompts else 0
        return self.prefix_params(cut) + prompts

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """Clients-table columns of ``round_``: the observation ``[a, delta, q]``, the
        sufficiency estimate ``r`` (eq. 6) and, in calibration rounds, the probe losses
        ``L_p1`` and ``L_pref`` (nats) and the label ``s`` (eq. 7); NaN where none."""
        out = {c.client_id: {"alignment_a": NAN, "drift_delta": NAN, "prompt_change_q": NAN,
                             "sufficiency_r": NAN, "probe_loss_p1": NAN, "probe_loss_pref": NAN,
                             "sufficient_s": NAN} for c in self.ctx.clients}
        for r_, cid, a, delta, q, r, _cut in self.decisions[-2 * len(out):]:
            if r_ == round_:
                out[cid].update(alignment_a=a, drift_delta=delta, prompt_change_q=q,
                                sufficiency_r=r)
        for cid, row in out.items():
            loss1, loss_ref, s = self.probes.get((round_, cid), (NAN, NAN, NAN))
            row.update(probe_loss_p1=loss1, probe_loss_pref=loss_ref, sufficient_s=s)
        return out
