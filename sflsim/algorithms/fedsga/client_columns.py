"""FedSGA's records: the columns of the clients table (the observation of Alg. 2 line 6,
the estimate ``r`` of eq. 6, the probe losses and label of eq. 7)."""

from __future__ import annotations

NAN = float("nan")


def client_columns(round_: int, client_ids: list[int],
                   decisions: list[tuple[int, int, float, float, float, float, int]],
                   probes: dict[tuple[int, int], tuple[float, float, float]]
                   ) -> dict[int, dict[str, float]]:
    """Clients-table columns of ``round_`` for ``client_ids``: the observation
    ``[a, delta, q]``, the sufficiency estimate ``r`` (eq. 6) of each client's decision in
    ``decisions`` and, in calibration rounds, the probe losses ``L_p1`` and ``L_pref``
    (nats) and the label ``s`` (eq. 7) of ``probes``; NaN where none."""
    out = {cid: {"alignment_a": NAN, "drift_delta": NAN, "prompt_change_q": NAN,
                 "sufficiency_r": NAN, "probe_loss_p1": NAN, "probe_loss_pref": NAN,
                 "sufficient_s": NAN} for cid in client_ids}
    for r_, cid, a, delta, q, r, _cut in decisions[-2 * len(out):]:
        if r_ == round_:
            out[cid].update(alignment_a=a, drift_delta=delta, prompt_change_q=q,
                            sufficiency_r=r)
    for cid, row in out.items():
        loss1, loss_ref, s = probes.get((round_, cid), (NAN, NAN, NAN))
        row.update(probe_loss_p1=loss1, probe_loss_pref=loss_ref, sufficient_s=s)
    return out
