"""FedSGA's split policy: the cut of a sufficiency estimate (§3.3, eq. 8), the choice of
the policies that replace it (``split: static | random | resource``, Fig. 4;
:mod:`sflsim.algorithms.split_policy`, chosen by
:meth:`~sflsim.algorithms.fedsga.FedSGA.split_config`) and, in timing-only runs, the cut a
trained run recorded."""

from __future__ import annotations

import math

from sflsim.errors import ConfigError


def split_index(r: float, num_candidates: int, rho: float) -> int:
    """FedSGA eq. 8: ``k = min(K, max(1, ceil(K (1 - r + rho))))``, 1-based.

    Example: K = 4, rho = 0.1: r = 0.9 gives k = 1, r = 0.2 gives k = 4.
    """
    k = math.ceil(num_candidates * (1.0 - r + rho) - 1e-9)
    return min(num_candidates, max(1, k))


class RecordedCuts:
    """The cuts a trained run recorded (``algorithm.split_schedule``), which a timing-only
    run of the same scenario takes at each split decision (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`, its ``recorded_cuts``).

    Args:
        path: the ``split_schedule`` file (for messages).
        schedule: ``{round: {client_id: cut}}`` as read from it.
        candidates: the candidate cuts.
    """

    def __init__(self, path: str, schedule: dict[int, dict[int, int]], candidates: list[int]):
        self.path, self.schedule, self.candidates = path, schedule, candidates

    def cut(self, round_: int, client_id: int) -> int:
        """The cut ``client_id`` takes at its decision in ``round_``.

        Raises:
            ConfigError: the recorded cut is not a candidate (the table shows a client
                that did not reach its decision in the recorded run as reaching it here:
                it records another scenario's run).
        """
        cut = self.schedule[round_][client_id]
        if cut not in self.candidates:
            raise ConfigError(
                f"algorithm.split_schedule: {self.path!r}: client {client_id} "
                f"decides its cut in round {round_}, and the table records cut_layer {cut}, "
                f"which is not a candidate (the recorded run did not reach this decision: it "
                f"is a run of another scenario); valid: a trained run of this scenario, whose "
                f"cuts are among {', '.join(map(str, self.candidates))}")
        return cut
