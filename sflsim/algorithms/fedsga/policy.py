"""FedSGA's split policy: the cut of a sufficiency estimate (§3.3, eq. 8), the choice of
the policies that replace it (``split: static | random | resource``, Fig. 4;
:mod:`sflsim.algorithms.split_policy`) and, in timing-only runs, the cut a trained run
recorded."""

from __future__ import annotations

import math

from sflsim.errors import ConfigError


def split_index(r: float, num_candidates: int, rho: float) -> int:
    """FedSGA eq. 8: ``k = min(K, max(1, ceil(K (1 - r + rho))))``, 1-based.

    Example: K = 4, rho = 0.1: r = 0.9 gives k = 1, r = 0.2 gives k = 4.
    """
    k = math.ceil(num_candidates * (1.0 - r + rho) - 1e-9)
    return min(num_candidates, max(1, k))


class SplitChoice:
    """FedSGA's split configuration and its recorded cuts (a part of
    :class:`~sflsim.algorithms.fedsga.FedSGA`)."""

    def split_config(self) -> tuple[str, list[int] | None, float | None]:
        cfg = self.scenario.algorithm
        return cfg.split, cfg.candidates, cfg.round_budget_s

    def scheduled_cut(self, round_: int, client_id: int) -> int:
        """The cut ``client_id`` takes at its decision in ``round_`` in a timing-only run:
        the one :attr:`schedule` recorded.

        Raises:
            ConfigError: the recorded cut is not a candidate (the table shows a client
                that did not reach its decision in the recorded run as reaching it here:
                it records another scenario's run).
        """
        cut = self.schedule[round_][client_id]
        if cut not in self.candidates:
            raise ConfigError(
                f"algorithm.split_schedule: {self.cfg.split_schedule!r}: client {client_id} "
                f"decides its cut in round {round_}, and the table records cut_layer {cut}, "
                f"which is not a candidate (the recorded run did not reach this decision: it "
                f"is a run of another scenario); valid: a trained run of this scenario, whose "
                f"cuts are among {', '.join(map(str, self.candidates))}")
        return cut
