"""What FedSGA's parts that are given the algorithm read of it: :class:`FedSGAState`.

:class:`~sflsim.algorithms.fedsga.observation.Observation`,
:class:`~sflsim.algorithms.fedsga.probes.CalibrationProbes` and the round end
(:mod:`~sflsim.algorithms.fedsga.round_end`) work on the algorithm's state by reference,
as a SimPy process keeps its environment; this is the whole of what they may read.
:class:`~sflsim.algorithms.fedsga.FedSGA` is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import nn

    from sflsim.algorithms.context import RunContext
    from sflsim.algorithms.costs import CostModel
    from sflsim.algorithms.fedsga.estimator import SufficiencyEstimation
    from sflsim.algorithms.fedsga.prototypes import ClassPrototypes
    from sflsim.algorithms.fedsga.server_side import ServerSide
    from sflsim.algorithms.protocol import RoundProtocol
    from sflsim.algorithms.steps import TorchSteps
    from sflsim.config.algorithms_fedsga import FedSGAConfig
    from sflsim.engine import Simulation
    from sflsim.models.prompts import PromptTokens


class FedSGAState(Protocol):
    """FedSGA's state as its parts read it (see the module docstring)."""

    ctx: RunContext
    sim: Simulation
    cfg: FedSGAConfig
    cost_model: CostModel
    steps: TorchSteps
    protocol: RoundProtocol
    #: the shallowest candidate cut p_1 and the reference cut p_ref (§3.3)
    p1: int
    p_ref: int
    #: the round being run
    round_: int
    #: {client_id: its private prompts} (§3.2; empty with adapt: false)
    prompts: dict[int, PromptTokens]
    #: probe: adapted: {client_id: stages p_1+1..p_ref as trained for it}
    adapted: dict[int, nn.Sequential]
    #: client_fronts: local: {client_id: its own stages}; this round's fronts and uploads
    fronts: dict[int, nn.Sequential]
    round_fronts: dict[int, nn.Sequential]
    client_copies: dict[int, nn.Sequential]
    global_model: nn.Sequential
    server_side: ServerSide
    class_prototypes: ClassPrototypes
    sufficiency: SufficiencyEstimation

    def _position(self, cut: int) -> int: ...

    def stage_bytes(self, start: int, stop: int | None = None) -> int: ...

    def aggregation_weight(self, client_id: int) -> float: ...
