"""The operators of a model piece as arrays (:class:`OpList`, one entry per aten kernel,
and :class:`PieceOps`, a training step's forward and backward): what
:func:`sflsim.models.ops.count_ops` gives and the cost model by operation
(:mod:`sflsim.hardware.operator_cost`) prices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: operator classes, indexed by :attr:`OpList.op_class`
OP_CLASSES = ("conv", "grouped_conv", "matmul", "elementwise")
CONV, GROUPED_CONV, MATMUL, ELEMENTWISE = range(len(OP_CLASSES))

#: OpList's per-operator arrays and their dtypes
_ARRAY_FIELDS = {"op_class": np.int8, "flops_per_sample": np.float64,
                 "flops_fixed": np.float64, "bytes_per_sample": np.float64,
                 "bytes_fixed": np.float64, "pointwise": np.bool_}


@dataclass(frozen=True, eq=False)
class OpList:
    """The operators (aten kernels) of one pass of a piece, one entry each, in call order.

    The work of operator ``i`` at batch size ``B`` is ``flops_per_sample[i] * B +
    flops_fixed[i]`` FLOPs and ``bytes_per_sample[i] * B + bytes_fixed[i]`` bytes.
    Arrays are read-only (lists are cached and shared).

    Attributes:
        op_class: ``(n,)`` int8, index into :data:`OP_CLASSES`.
        flops_per_sample: ``(n,)`` float64, FLOPs that scale with the batch, per sample.
        flops_fixed: ``(n,)`` float64, FLOPs independent of the batch (almost always 0).
        bytes_per_sample: ``(n,)`` float64, bytes read + written that scale with the
            batch, per sample (activations and their gradients).
        bytes_fixed: ``(n,)`` float64, bytes read + written independent of the batch
            (weights, their gradients, normalisation statistics).
        names: aten operator names, e.g. ``"aten.convolution.default"``.
        pointwise: ``(n,)`` bool, the operator is a 1x1, stride-1, undilated, not
            transposed convolution (forward or backward): what PyTorch's CPU convolution
            runs one sample at a time on one thread below batch 16, re-reading the
            weights for each sample (see :attr:`sflsim.hardware.operator_cost.
            OperatorParams.pointwise_per_sample_below_batch`). Default: all false.
    """

    op_class: np.ndarray
    flops_per_sample: np.ndarray
    flops_fixed: np.ndarray
    bytes_per_sample: np.ndarray
    bytes_fixed: np.ndarray
    names: tuple[str, ...]
    pointwise: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.names)
        object.__setattr__(self, "names", tuple(self.names))
        if self.pointwise is None:
            object.__setattr__(self, "pointwise", np.zeros(n, dtype=bool))
        for field, dtype in _ARRAY_FIELDS.items():
            value = np.array(getattr(self, field), dtype=dtype).reshape(-1)
            if value.shape != (n,):
                raise ValueError(f"OpList.{field} has {value.size} entries, names {n}")
            value.setflags(write=False)
            object.__setattr__(self, field, value)

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OpList):
            return NotImplemented
        return self.names == other.names and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in _ARRAY_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def empty(cls) -> OpList:
        """No operators."""
        return cls(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), ())

    @classmethod
    def concat(cls, lists) -> OpList:
        """The operators of ``lists`` one after the other."""
        lists = list(lists)
        if not lists:
            return cls.empty()
        return cls(**{f: np.concatenate([getattr(x, f) for x in lists]) for f in _ARRAY_FIELDS},
                   names=tuple(name for x in lists for name in x.names))

    def flops(self, batch: int) -> np.ndarray:
        """FLOPs of each operator at batch size ``batch``."""
        return self.flops_per_sample * batch + self.flops_fixed

    def bytes(self, batch: int) -> np.ndarray:
        """Bytes read + written by each operator at batch size ``batch``."""
        return self.bytes_per_sample * batch + self.bytes_fixed

    def of_class(self, op_class: str) -> OpList:
        """The operators of one class (a name of :data:`OP_CLASSES`), in order."""
        keep = self.op_class == OP_CLASSES.index(op_class)
        return OpList(**{f: getattr(self, f)[keep] for f in _ARRAY_FIELDS},
                      names=tuple(n for n, k in zip(self.names, keep) if k))

    def totals(self) -> dict[str, dict[str, float]]:
        """Per class: ``ops``, ``flops_per_sample``, ``flops_fixed``,
        ``bytes_per_sample``, ``bytes_fixed`` summed over its operators."""
        out = {}
        for i, name in enumerate(OP_CLASSES):
            keep = self.op_class == i
            out[name] = {"ops": int(keep.sum()),
                         **{f: float(getattr(self, f)[keep].sum())
                            for f in ("flops_per_sample", "flops_fixed", "bytes_per_sample",
                                      "bytes_fixed")}}
        return out


@dataclass(frozen=True, eq=False)
class PieceOps:
    """The operators of a training step's forward and backward of one piece.

    Attributes:
        forward: the forward's operators.
        backward: the backward's operators (empty when not counted or when nothing
            needs a gradient).
        params: parameters of the piece (elements).
        param_tensors: parameter tensors that train (``requires_grad``).
        output_shape: per-sample output shape.
    """

    forward: OpList
    backward: OpList
    params: int
    param_tensors: int
    output_shape: tuple[int, ...]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PieceOps):
            return NotImplemented
        return (self.forward == other.forward and self.backward == other.backward
                and (self.params, self.param_tensors, self.output_shape)
                == (other.params, other.param_tensors, other.output_shape))

    __hash__ = None  # type: ignore[assignment]
