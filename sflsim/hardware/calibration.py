"""Fitting the cost model by operation to measured training steps (``sflsim calibrate``).

Each measurement is one model's step at one batch size on one device, in seconds.
The devices of one fit form a family: each device's parameters (``log`` of the 7 of
:class:`~sflsim.hardware.operator_cost.OperatorParams`) are

    theta_d = theta_F + s_d * u + delta_d

with ``theta_F`` shared by the family, ``s_d`` a free speed of the device (``u`` makes
every rate and the bandwidth ``e^s`` times larger and the fixed costs ``e^s`` times
smaller), and ``delta_d`` the device's own departures from the family's shape. The fit
minimises, by :func:`scipy.optimize.least_squares`,

    sum_j log(predicted_j / measured_j)^2 / sigma^2 + |theta_F - theta_0|^2 / sigma_F^2
        + sum_d |delta_d|^2 / sigma_d^2

where ``theta_0`` is a prior (another device's fitted parameters, ``--prior``, or
:data:`GENERIC_PRIOR`). The priors make a fit on few points well posed: with three
measured models on a board, the board's speed comes from its data and the shape of its
costs (which classes of operator run slowly) from the family and the prior. The widths
(:data:`DATA_SIGMA`, :data:`FAMILY_SIGMA`, :data:`DEVICE_SIGMA`) were set before any
held-out point was seen and are not tuned on them.

:func:`leave_one_model_out` refits without each (device, model) in turn and predicts
it: the error a user should expect on a model the fit never saw on that device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sflsim.hardware.operator_cost import OperatorParams, Workload, step_seconds

#: a prior for a device of unknown shape: 10 GFLOP/s in every class, 10 GB/s of memory
#: bandwidth, 20 us per operator and 1 ms per batch (orders of magnitude of an edge CPU)
GENERIC_PRIOR = OperatorParams(rates_flops=(1e10, 1e10, 1e10, 1e10),
                               memory_bandwidth_bps=8e10, per_operator_s=2e-5,
                               per_batch_s=1e-3)
#: expected error of one measured row (log scale): timing noise plus the model's own error
DATA_SIGMA = 0.05
#: width of the family's prior (log scale): a factor e per parameter given a fitted
#: device as prior; :data:`GENERIC_SIGMA` with the generic prior
FAMILY_SIGMA = 1.0
GENERIC_SIGMA = 3.0
#: width of a device's departure from its family's shape beyond its speed (log scale)
DEVICE_SIGMA = 0.25
#: the speed direction u: rates and bandwidth up, fixed costs down
SPEED = np.array([1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0])
N_PARAMS = 7


@dataclass(frozen=True)
class Measurement:
    """One measured step.

    Attributes:
        device: the device's name.
        model: the model's name as the row gives it (a leave-one-model-out unit).
        label: a readable name of the row, e.g. ``"rpi4/resnet18/b16"``.
        work: the step's operators (:class:`~sflsim.hardware.operator_cost.Workload`).
        measured_s: measured seconds per step (> 0).
        pointwise_per_sample_below_batch: the measuring device's kernel rule
            (:func:`~sflsim.hardware.operator_cost.pointwise_rule` of the torch threads
            it ran on); the same for every row of a device.
    """

    device: str
    model: str
    label: str
    work: Workload
    measured_s: float
    pointwise_per_sample_below_batch: int = 0
    #: the torch threads the step ran on (None: not known)
    threads: int | None = None


@dataclass(frozen=True)
class Fit:
    """A fitted family: each device's parameters and the residuals on the fitted rows."""

    params: dict[str, OperatorParams]
    #: label -> (predicted - measured) / measured on the rows fitted
    fit_error: dict[str, float]


def predict(params: OperatorParams, m: Measurement) -> float:
    """Predicted seconds of measurement ``m``'s step on a device with ``params``."""
    return step_seconds(params, m.work)


def kernel_rules(measurements: Sequence[Measurement]) -> dict[str, int]:
    """Each device's ``pointwise_per_sample_below_batch``, from its rows.

    Raises:
        ValueError: a device's rows disagree (measured on different thread counts).
    """
    rules: dict[str, dict[int, list[str]]] = {}
    for m in measurements:
        rules.setdefault(m.device, {}).setdefault(m.pointwise_per_sample_below_batch,
                                                  []).append(m.label)
    for device, values in rules.items():
        if len(values) > 1:
            one, other = (values[v][0] for v in sorted(values, reverse=True))
            raise ValueError(f"device {device}: some rows were measured on one torch thread "
                             f"(e.g. {one}), others on several or an unknown number (e.g. "
                             f"{other}; column threads), which run 1x1 convolutions with "
                             f"different kernels; give them two device names, or fill in "
                             f"threads")
    return {d: next(iter(v)) for d, v in rules.items()}


def fit(measurements: Sequence[Measurement], prior: OperatorParams | None = None) -> Fit:
    """Fit the devices of ``measurements`` as one family (module docstring).

    Args:
        measurements: at least one measured step; each device needs at least one.
        prior: the family's prior (a fitted device of similar kind); ``None`` uses
            :data:`GENERIC_PRIOR` with the wider :data:`GENERIC_SIGMA`.

    Returns:
        A :class:`Fit`.

    Raises:
        ValueError: no measurements, or a measured time that is not above 0.
    """
    from scipy.optimize import least_squares

    if not measurements:
        raise ValueError("no measurements to fit")
    for m in measurements:
        if not m.measured_s > 0:
            raise ValueError(f"{m.label}: measured seconds must be above 0, got {m.measured_s}")
    devices = sorted({m.device for m in measurements})
    rules = kernel_rules(measurements)
    index = {d: k for k, d in enumerate(devices)}
    theta0 = (prior or GENERIC_PRIOR).as_log_vector()
    sigma_f = FAMILY_SIGMA if prior is not None else GENERIC_SIGMA
    n_dev = len(devices)
    measured = np.log([m.measured_s for m in measurements])

    def unpack(x: np.ndarray) -> list[np.ndarray]:
        theta_f, speeds = x[:N_PARAMS], x[N_PARAMS:N_PARAMS + n_dev]
        deltas = x[N_PARAMS + n_dev:].reshape(n_dev, N_PARAMS)
        return [theta_f + speeds[k] * SPEED + deltas[k] for k in range(n_dev)]

    def residuals(x: np.ndarray) -> np.ndarray:
        thetas = [OperatorParams.from_log_vector(t, rules[d]) for d, t in zip(devices, unpack(x))]
        pred = np.log([predict(thetas[index[m.device]], m) for m in measurements])
        deltas = x[N_PARAMS + n_dev:]
        return np.concatenate([(pred - measured) / DATA_SIGMA, (x[:N_PARAMS] - theta0) / sigma_f,
                               deltas / DEVICE_SIGMA])

    # start: the prior's shape at each device's own speed (the median log ratio)
    speeds = np.zeros(n_dev)
    for d, k in index.items():
        base = OperatorParams.from_log_vector(theta0, rules[d])
        ratios = [np.log(predict(base, m) / m.measured_s) for m in measurements if m.device == d]
        speeds[k] = float(np.median(ratios))
    x0 = np.concatenate([theta0, speeds, np.zeros(n_dev * N_PARAMS)])
    result = least_squares(residuals, x0, method="trf", x_scale=1.0, diff_step=1e-4,
                           max_nfev=400 * len(x0))
    params = {d: OperatorParams.from_log_vector(t, rules[d])
              for d, t in zip(devices, unpack(result.x))}
    errors = {m.label: predict(params[m.device], m) / m.measured_s - 1 for m in measurements}
    return Fit(params=params, fit_error=errors)


def leave_one_model_out(measurements: Sequence[Measurement], prior: OperatorParams | None = None,
                        everywhere: bool = False) -> dict[str, float]:
    """Relative error of each row when its (device, model) is left out of the fit.

    Args:
        measurements: the rows (as for :func:`fit`).
        prior: as for :func:`fit`.
        everywhere: leave the model out on every device of the fit, not only on the
            row's own (the stricter test: the model was never seen in the family).

    Returns:
        ``{label: (predicted - measured) / measured}`` for every row whose device keeps
        at least one other row in the fit (a device measured on one model has nothing
        left to fit on and is left out of the result).
    """
    out: dict[str, float] = {}
    for device, model in sorted({(m.device, m.model) for m in measurements}):
        train = [m for m in measurements
                 if not (m.model == model and (everywhere or m.device == device))]
        if not any(m.device == device for m in train):
            continue
        params = fit(train, prior).params[device]
        for m in measurements:
            if m.device == device and m.model == model:
                out[m.label] = predict(params, m) / m.measured_s - 1
    return out
