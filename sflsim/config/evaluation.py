"""What a run measures besides training: evaluation on the test split, the early-exit
inference sweep after training (Hetero-SplitEE Alg. 3), and how device energy is counted
(the ``energy`` section)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from sflsim.config.schema_model import SchemaModel as _Model
from sflsim.inputs.quantities import FROZEN


class EarlyExitConfig(_Model):
    """Collaborative early-exit inference after training (Hetero-SplitEE Alg. 3).

    A test sample exits on the device when the exit head's confidence C = -H (H the
    entropy of its softmax, in nats) is above the threshold tau, else its activations
    go to the server. tau is swept from ``tau_min`` to ``tau_max`` in steps of
    ``tau_step`` (paper: entropy thresholds 0 to 4 in steps of 0.05). Applies to the
    algorithms with exit heads (Hetero-SplitEE, distributed, centralized).
    """

    model_config = FROZEN
    #: Run the sweep after the last round (algorithms with exit heads only).
    enabled: bool = True
    #: Lowest threshold on C = -H (most samples exit); entropy threshold -tau_min.
    tau_min: float = -4.0
    #: Highest threshold on C = -H (fewest exit); C <= 0, so tau_max >= 0 exits none.
    tau_max: float = 0.0
    #: Step between thresholds (paper: 0.05).
    tau_step: float = Field(0.05, gt=0)
    #: Test samples each client infers in the latency simulation; None = all.
    samples_per_client: int | None = Field(200, ge=1)
    #: Samples the device infers at once (the offloaded ones of a batch travel together).
    batch_size: int = Field(1, ge=1)

    @field_validator("tau_max")
    @classmethod
    def _above_min(cls, v: float, info: ValidationInfo) -> float:
        low = info.data.get("tau_min")
        if low is not None and v <= low:
            raise ValueError(f"must be greater than tau_min ({low:g})")
        return v

    @field_validator("tau_step")
    @classmethod
    def _few_thresholds(cls, v: float, info: ValidationInfo) -> float:
        low, high = info.data.get("tau_min"), info.data.get("tau_max")
        if low is not None and high is not None and (high - low) / v > 100_000:
            raise ValueError(f"makes {(high - low) / v:.0f} thresholds from tau_min to tau_max; "
                             f"valid: at most 100,000 (paper: 0.05)")
        return v


class EvaluationConfig(_Model):
    """When and on how many test samples accuracy is measured, and the early-exit sweep."""

    model_config = FROZEN
    #: Evaluate on the test split every this many rounds (and after the last).
    every_rounds: int = Field(1, ge=1)
    #: Use at most this many test samples (a seeded random subset); None = all.
    max_test_samples: int | None = Field(None, ge=1)
    #: Test samples per forward pass while evaluating (memory, not results).
    batch_size: int = Field(500, ge=1)
    #: Early-exit inference sweep after the last round (``early_exit.csv``).
    early_exit: EarlyExitConfig = EarlyExitConfig()


class EnergyConfig(_Model):
    """How each device's energy (J) is counted from the event trace and its profile's
    powers (W); see :mod:`sflsim.metrics.records`. Compute energy is always busy time x
    ``active_power_w``; radio power is drawn on top of compute or idle power.

    Defaults follow the device-energy model of the federated-learning energy literature,
    which counts the energy of the work a device does for training, computation plus
    transmission (Tran et al., "Federated Learning over Wireless Networks: Optimization
    Model Design and Analysis", IEEE INFOCOM 2019; Yang et al., "Energy Efficient
    Federated Learning Over Wireless Communication Networks", IEEE Transactions on
    Wireless Communications 2021, arXiv:1911.02417, where transmission energy is
    transmit power x the time to send the bits, data size / rate), plus the idle power
    a taking-part device draws while it waits within its round.
    """

    #: When a device's radio draws its transmit (receive) power. ``serialisation``: while
    #: it sends (receives) bits, from the start of a transfer until its last bit has left
    #: (arrival minus the link's one-way latency), counted once however many transfers of
    #: that direction overlap (the union of the intervals): the literature's transmit
    #: power x bits / rate. ``transfer``: from the start of a transfer until its last bit
    #: arrives (latency included), also as a union, counted once.
    radio_on: Literal["serialisation", "transfer"] = "serialisation"
    #: Which devices draw idle power, and when, while not computing. ``participants``: a
    #: device that takes part in the round (trained, late, over-committed) from the
    #: round's start to its end; one that did some work and then left (went offline)
    #: until its last activity ended; a device not sampled, dropped or offline at the
    #: start draws nothing. ``all``: every device for the whole round, taking part or not.
    #: ``none``: no device (compute and radio only, the cited papers' model).
    idle_draw: Literal["participants", "all", "none"] = "participants"
