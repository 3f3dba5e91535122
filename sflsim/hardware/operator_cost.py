"""The cost model by operation: a training step's seconds from its operators.

A pass (forward or backward) through a model piece is a list of operators (aten
kernels, counted by :func:`sflsim.models.ops.count_ops`). On a device, operator ``i``
of class ``c`` on a batch of ``B`` samples takes

    t_i = max(F_i(B) / R_c, Y_i(B) / W) + t_op

where ``F_i(B) = f_i * B`` are its FLOPs, ``Y_i(B) = a_i * B + w_i`` the bytes it
reads and writes (``w_i``: weights, which do not grow with the batch), ``R_c`` the
device's rate for the class (FLOP/s), ``W`` its memory bandwidth (bytes/s) and
``t_op`` a fixed cost per operator (dispatch, kernel launch). This is the roofline
model (S. Williams, A. Waterman and D. Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009) applied per operator,
as nn-Meter (L. L. Zhang et al., MobiSys 2021) and Habitat (G. X. Yu et al., USENIX
ATC 2021) predict per kernel. A training step adds the optimizer update of the trained
parameters (memory-bound: :data:`UPDATE_BYTES_PER_PARAM` bytes per parameter, one
operator per parameter tensor and state) and a fixed cost per batch (data loading).

Operator classes (:data:`OP_CLASSES`): dense convolution, grouped/depthwise
convolution, matrix multiply (linear layers, attention) and element-wise
(normalisation, activations, pooling, additions; 1 FLOP per output element).

Nothing here imports torch: operator lists arrive as numpy arrays (any object with
``op_class``, ``flops_per_sample``, ``bytes_per_sample`` and ``bytes_fixed``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: operator classes, in the order of :attr:`OperatorParams.rates_flops`
OP_CLASSES = ("conv", "grouped_conv", "matmul", "elementwise")

#: PyTorch's CPU convolution runs a 1x1, stride-1, undilated float32 convolution with its
#: own per-sample kernel (``_slow_conv2d``: one matrix multiply per sample) instead of
#: oneDNN when it has one thread and the batch is below 16 (``ConvParams::use_mkldnn`` in
#: aten/src/ATen/native/Convolution.cpp: "For 1x1 filters, MKLDNN is faster than THNN
#: when multi-threaded, but THNN is faster when single-threaded"); seen with
#: ``torch.profiler`` on torch 2.14 (``_slow_conv2d_forward``/``_backward`` at batch 4,
#: ``mkldnn_convolution`` at 16)
PYTORCH_ONE_THREAD_POINTWISE_BELOW_BATCH = 16


def pointwise_rule(threads: int | None) -> int:
    """:attr:`OperatorParams.pointwise_per_sample_below_batch` of a PyTorch CPU device
    training on ``threads`` torch threads (``None``: not known, taken as several)."""
    return PYTORCH_ONE_THREAD_POINTWISE_BELOW_BATCH if threads == 1 else 0

#: bytes read and written per parameter by one optimizer update (fp32): SGD reads the
#: parameter and its gradient and writes the parameter; momentum also reads and writes its
#: buffer; Adam reads and writes two moments (torch.optim's single-tensor updates)
UPDATE_BYTES_PER_PARAM = {"sgd": 12.0, "sgd_momentum": 20.0, "adam": 28.0}
#: element-wise kernels per parameter tensor of one update (torch.optim's for-loop path
#: on the CPU: ``add_`` for SGD; ``mul_``/``add_`` per buffer for momentum; Adam's
#: moment updates, bias corrections, ``sqrt``, ``div`` and ``addcdiv_``)
UPDATE_OPS_PER_TENSOR = {"sgd": 1, "sgd_momentum": 3, "adam": 7}


class OpArrays(Protocol):
    """The operators of one pass (:class:`sflsim.models.ops.OpList` is one)."""

    op_class: np.ndarray          # (n,) index into OP_CLASSES
    flops_per_sample: np.ndarray  # (n,) FLOPs per sample
    bytes_per_sample: np.ndarray  # (n,) bytes read + written per sample
    bytes_fixed: np.ndarray       # (n,) bytes read + written whatever the batch
    pointwise: np.ndarray         # (n,) bool, a 1x1 stride-1 convolution (OpList.pointwise)


@dataclass(frozen=True)
class OperatorParams:
    """A device's operator cost parameters, in SI units.

    Attributes:
        rates_flops: FLOP/s per operator class, in the order of :data:`OP_CLASSES`.
        memory_bandwidth_bps: sustained memory bandwidth (bit/s, as links are given;
            the roofline uses bytes/s = this / 8).
        per_operator_s: fixed seconds per operator.
        per_batch_s: fixed seconds per training or inference batch (data loading).
        pointwise_per_sample_below_batch: below this batch size the device's
            convolution library runs 1x1, stride-1 convolutions
            (:attr:`sflsim.models.ops.OpList.pointwise`) one sample at a time, reading
            the weights (and, backward, their gradient) once per sample: their fixed
            bytes count ``batch`` times. PyTorch on a CPU does this on one thread below
            batch 16 (:data:`PYTORCH_ONE_THREAD_POINTWISE_BELOW_BATCH`); 0 (the default)
            never. A property of the software the device runs, not fitted.
    """

    rates_flops: tuple[float, float, float, float]
    memory_bandwidth_bps: float
    per_operator_s: float
    per_batch_s: float
    pointwise_per_sample_below_batch: int = 0

    def as_log_vector(self) -> np.ndarray:
        """``log`` of the 7 parameters (rates, bandwidth, per-operator, per-batch)."""
        return np.log([*self.rates_flops, self.memory_bandwidth_bps, self.per_operator_s,
                       self.per_batch_s])

    @classmethod
    def from_log_vector(cls, theta: np.ndarray,
                        pointwise_per_sample_below_batch: int = 0) -> OperatorParams:
        """The parameters whose ``log`` is ``theta`` (:meth:`as_log_vector`), with the
        kernel rule ``pointwise_per_sample_below_batch`` (not part of the vector)."""
        v = [float(x) for x in np.exp(theta)]
        return cls(rates_flops=(v[0], v[1], v[2], v[3]), memory_bandwidth_bps=v[4],
                   per_operator_s=v[5], per_batch_s=v[6],
                   pointwise_per_sample_below_batch=pointwise_per_sample_below_batch)


def pass_seconds(params: OperatorParams, ops: OpArrays, batch: int) -> float:
    """Seconds of one pass of ``ops`` over ``batch`` samples (no per-batch cost).

    Raises:
        ValueError: ``batch`` is below 1.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if len(ops.op_class) == 0:
        return 0.0
    rates = np.asarray(params.rates_flops)[np.asarray(ops.op_class, dtype=np.int64)]
    compute = np.asarray(ops.flops_per_sample) * batch / rates
    fixed = np.asarray(ops.bytes_fixed)
    if batch < params.pointwise_per_sample_below_batch:
        fixed = np.where(ops.pointwise, fixed * batch, fixed)  # weights read per sample
    memory = (np.asarray(ops.bytes_per_sample) * batch + fixed) / (params.memory_bandwidth_bps / 8)
    return float(np.maximum(compute, memory).sum() + len(ops.op_class) * params.per_operator_s)


def update_seconds(params: OperatorParams, trained_params: int, param_tensors: int,
                   optimizer: str = "sgd") -> float:
    """Seconds of one optimizer update of ``trained_params`` parameters held in
    ``param_tensors`` tensors; ``optimizer`` is a key of :data:`UPDATE_BYTES_PER_PARAM`.

    Raises:
        ValueError: an unknown optimizer.
    """
    if optimizer not in UPDATE_BYTES_PER_PARAM:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: "
                         f"{', '.join(UPDATE_BYTES_PER_PARAM)}")
    bytes_moved = trained_params * UPDATE_BYTES_PER_PARAM[optimizer]
    return (bytes_moved / (params.memory_bandwidth_bps / 8)
            + param_tensors * UPDATE_OPS_PER_TENSOR[optimizer] * params.per_operator_s)


def optimizer_kind(name: str, momentum: float = 0.0) -> str:
    """The key of :data:`UPDATE_BYTES_PER_PARAM` for an optimizer ``name`` ("sgd" or
    "adam") and its momentum."""
    if name == "adam":
        return "adam"
    return "sgd_momentum" if momentum else "sgd"


@dataclass(frozen=True)
class Workload:
    """A whole training (or inference) step of one model at one batch size: what
    :func:`step_seconds` prices and ``sflsim calibrate`` fits on.

    Attributes:
        forward, backward: the model's operators (backward empty for inference).
        trained_params, param_tensors: what the optimizer updates (0 for inference).
        batch: samples per batch.
        optimizer: a key of :data:`UPDATE_BYTES_PER_PARAM`.
    """

    forward: OpArrays
    backward: OpArrays
    trained_params: int
    param_tensors: int
    batch: int
    optimizer: str = "sgd"

    @property
    def training(self) -> bool:
        return len(self.backward.op_class) > 0


def counted_flops(work: Workload) -> float:
    """The FLOPs the FLOP counter gives for ``work`` (convolutions and matrix multiplies,
    forward and backward, at its batch): what the FLOPs-only reading divides by a rate."""
    counted = [k for k, c in enumerate(OP_CLASSES) if c != "elementwise"]
    return work.batch * sum(float(ops.flops_per_sample[np.isin(ops.op_class, counted)].sum())
                            for ops in (work.forward, work.backward))


def step_seconds(params: OperatorParams, work: Workload) -> float:
    """Seconds of one step of ``work`` on a device with ``params``: forward, backward,
    optimizer update and the per-batch cost."""
    t = pass_seconds(params, work.forward, work.batch) + params.per_batch_s
    if work.training:
        t += pass_seconds(params, work.backward, work.batch)
        t += update_seconds(params, work.trained_params, work.param_tensors, work.optimizer)
    return t


def effective_flops_per_s(params: OperatorParams, work: Workload, flops: float) -> float:
    """The FLOP/s at which ``flops`` (the FLOP counter's count of ``work``) take as
    long as :func:`step_seconds` says: the rate the FLOPs-only steps of an algorithm
    run at under the operator reading."""
    seconds = step_seconds(params, work)
    return flops / seconds if seconds > 0 and flops > 0 else math.inf
