"""Per-operator work of a model piece: FLOPs and bytes of every aten kernel it runs.

:func:`count_ops` runs a copy of a piece on PyTorch's ``meta`` device (shapes only, no
kernel runs, the same on every host) in training mode, as one training step does
(BatchNorm computes batch statistics and updates its running ones, dropout draws its
mask), records every aten operator the forward and then the backward call, and gives
for each its class, FLOPs and bytes moved, split into a part proportional to the batch
and a fixed part. A cost model built on it predicts a pass's time as a sum over its
operators of ``max(FLOPs / rate[class], bytes / memory bandwidth)`` plus a fixed cost
per operator: the roofline model (S. Williams, A. Waterman and D. Patterson, "Roofline:
an insightful visual performance model for multicore architectures", Communications of
the ACM 52(4), 2009), applied operator by operator.

Operators are recorded as the dispatcher hands them to a kernel (``native_batch_norm``,
``silu_backward``), not decomposed into their parts as ``FlopCounterMode`` does: one
operator per kernel the CPU runs, as ``torch.profiler`` lists them (checked on
efficientnet_b0: decomposed, ``silu_backward`` alone became some 200 element-wise
operators).

What is counted, per operator:

- **Class** (:data:`sflsim.models.oplist.OP_CLASSES`): convolutions (``aten.convolution`` and its backward,
  ``aten.convolution_backward``) are ``conv`` when ``groups == 1`` and ``grouped_conv``
  otherwise (grouped and depthwise); ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``mv``,
  ``addmv``, ``dot``, ``addbmm``, ``_addmm_activation``, ``_scaled_mm`` and the fused
  attention kernels are ``matmul``; every other operator that does work is
  ``elementwise`` (normalisation, activations, pooling, additions, softmax, copies,
  sums, dropout's mask, ...).
- **FLOPs** (2 per multiply-add): convolutions by :func:`sflsim.models.cost.conv_flops`
  (exact for grouped and depthwise convolutions, which torch's own formula is not);
  matrix multiplies by the formulas of :data:`torch.utils.flop_counter.flop_registry`
  (``2 * m * n * k``; the added bias of ``addmm`` and a convolution's bias are not
  counted, as there). Attention runs on the math kernel
  (``sdpa_kernel(SDPBackend.MATH)``), so it is counted as its matrix multiplies,
  softmax and scaling. An ``elementwise`` operator counts 1 FLOP per element of the
  largest tensor it reads or writes, the piece's parameters and buffers aside: exact
  for a map such as ReLU or an addition, one addition per element reduced for a sum or
  mean (whose output is small), and otherwise an approximation: these operators are
  bound by memory, not arithmetic, and their FLOPs only matter where they are not.
- **Bytes**: ``numel * element_size`` of every tensor argument read plus every tensor
  written (the outputs, and the arguments an operator updates in place:
  ``add_``'s ``self`` is read and written, BatchNorm's running statistics are written).
  A tensor that repeats elements through a zero stride (an ``expand``) counts its
  distinct elements. Caches are not modelled: every operator reads its inputs from and
  writes its outputs to memory.
- **Per sample and fixed**: each pass is recorded at two batch sizes
  (:data:`COUNT_BATCHES`, the same operators in the same order) and each count is
  split as ``per_sample * B + fixed``: activations scale with the batch, weights and
  their gradients (``bytes_fixed``) do not. FLOPs are per sample, but for the odd fixed
  operator (BatchNorm's ``num_batches_tracked += 1``: 1 FLOP in ``flops_fixed``).

Left out entirely (they are not operators that run a kernel over data):

- views and aliases, every operator whose schema returns an alias of an input without
  writing it (``OpOverload.is_view``): ``view``, ``reshape`` (as a view), ``t``,
  ``transpose``, ``permute``, ``expand``, ``unsqueeze``, ``squeeze``, ``slice``,
  ``select``, ``as_strided``, ``split``, ``unbind``, ``narrow``, ``diagonal``,
  ``unfold``, ``detach``, ``alias``, ``lift_fresh``, ``view_as_real``, ...; and
  :data:`NOT_OPERATORS`' ``_unsafe_view``, ``_reshape_alias`` and ``lift_fresh_copy``
  (a view and a constant, though their schemas say otherwise);
- tensors made from nothing for the pass's bookkeeping (:data:`NOT_OPERATORS`):
  ``empty``, ``empty_like``, ``empty_strided``, ``new_empty``, ``new_empty_strided``,
  ``zeros``, ``zeros_like``, ``new_zeros``, ``ones``, ``ones_like``, ``new_ones``,
  ``full``, ``full_like``, ``new_full``, ``scalar_tensor``, ``arange``;
- operators that return no tensor (size, stride and other metadata queries);
- the gradient of the loss (``torch.ones_like(output)``, made before the backward is
  recorded; no ``.sum()`` is added) and the accumulation of the input's gradient into a
  leaf (a piece's input gradient is computed, not stored). The parameters' gradients are
  written as in a step after ``zero_grad(set_to_none=True)``: taken over, not added.

Counting torchvision's resnet18 at 3x224x224 (forward and backward at both batch sizes)
takes about 0.4 s and mobilenet_v2 about 0.7 s on 2 cores of an AMD EPYC (torch 2.14);
train-mode BatchNorm on ``meta`` is not slow (resnet18's forward at batch 4 takes 41 ms
in training mode, 22 ms in eval mode). Results are kept for the process, keyed as
:func:`sflsim.models.cost.count_flops`'s.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from sflsim.models.cost import conv_flops, piece_key
from sflsim.models.oplist import (
    CONV,
    ELEMENTWISE,
    GROUPED_CONV,
    MATMUL,
    OpList,
    PieceOps,
)

aten = torch.ops.aten

#: the two batch sizes each pass is recorded at (per-sample = difference / 2)
COUNT_BATCHES = (2, 4)

#: operators left out although their schema does not call them views (see module doc)
NOT_OPERATORS = frozenset({
    aten._unsafe_view, aten._reshape_alias, aten.lift_fresh, aten.lift_fresh_copy,
    aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
    aten.zeros, aten.zeros_like, aten.new_zeros, aten.ones, aten.ones_like, aten.new_ones,
    aten.full, aten.full_like, aten.new_full, aten.scalar_tensor, aten.arange,
})

_CONV_FORWARD = frozenset({aten.convolution, aten._convolution, aten.convolution_overrideable})
_CONV_BACKWARD = frozenset({aten.convolution_backward, aten.convolution_backward_overrideable})


def _mv_flops(a_shape, x_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * a_shape[1]


def _addmv_flops(self_shape, a_shape, x_shape, *args, out_shape=None, **kwargs) -> int:
    return _mv_flops(a_shape, x_shape)


def _dot_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0]


def _addbmm_flops(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    b, m, k = a_shape
    return 2 * b * m * k * b_shape[2]


def _shapes(formula):
    """``formula`` on shapes, called with the operator's tensors and ``out_val``."""
    def call(*args, out_val=None, **kwargs):
        shape = lambda v: tuple(v.shape) if isinstance(v, torch.Tensor) else v  # noqa: E731
        return formula(*[shape(a) for a in args],
                       out_shape=shape(out_val) if isinstance(out_val, torch.Tensor) else None,
                       **{k: shape(v) for k, v in kwargs.items()})
    return call


#: ``matmul`` operators and their FLOP formulas (called with tensors and ``out_val``)
_MATMUL_FORMULAS = {
    **{op: flop_registry[op] for op in flop_registry
       if op not in _CONV_FORWARD | _CONV_BACKWARD and "conv" not in str(op)},
    aten._addmm_activation: flop_registry[aten.addmm],
    aten.mv: _shapes(_mv_flops),
    aten.addmv: _shapes(_addmv_flops),
    aten.dot: _shapes(_dot_flops),
    aten.vdot: _shapes(_dot_flops),
    aten.addbmm: _shapes(_addbmm_flops),
}

#: other convolutions of torch's registry (not seen on ``meta``), counted as torch does
_OTHER_CONV_FORMULAS = {op: flop_registry[op] for op in flop_registry
                        if op not in _CONV_FORWARD | _CONV_BACKWARD and "conv" in str(op)}


def count_ops(module: nn.Module, input_shape: tuple[int, ...], *, backward: bool = True,
              input_requires_grad: bool = False) -> PieceOps:
    """Count the operators of a training step's forward and backward of ``module``.

    An ``nn.Sequential`` is counted child by child and the lists concatenated (the
    backward's in reverse, as it runs; a child's input needs its gradient when the
    chain's input does or a parameter before it trains), each piece's count kept for the
    life of the process under :func:`sflsim.models.cost.piece_key`: the stages a run's
    client-side and server-side models share are counted once.

    Args:
        module: the piece; it is deep-copied to the ``meta`` device and run in training
            mode, the original is not run. Its forward must not branch on tensor values
            and must return one tensor.
        input_shape: per-sample input shape, e.g. ``(C, H, W)``.
        backward: also count the backward of the output (with a gradient of ones).
        input_requires_grad: count the gradient w.r.t. the input (needed when
            activation gradients are sent back to a client).

    Returns:
        A :class:`PieceOps`.
    """
    if type(module) is nn.Sequential and len(module) > 1:  # a plain chain, not a subclass
        parts, shape, needs_grad = [], tuple(input_shape), input_requires_grad
        for child in module:
            part = count_ops(child, shape, backward=backward, input_requires_grad=needs_grad)
            parts.append(part)
            shape = part.output_shape
            needs_grad = needs_grad or any(p.requires_grad for p in child.parameters())
        params = list(module.parameters())
        return PieceOps(forward=OpList.concat(p.forward for p in parts),
                        backward=OpList.concat(p.backward for p in reversed(parts)),
                        params=sum(p.numel() for p in params),
                        param_tensors=sum(p.requires_grad for p in params),
                        output_shape=shape)
    key = piece_key(module, input_shape, backward=backward,
                    input_requires_grad=input_requires_grad)
    ops = _COUNTED_OPS.get(key)
    if ops is None:
        ops = _COUNTED_OPS[key] = _count_ops_on_meta(
            module, tuple(input_shape), backward=backward,
            input_requires_grad=input_requires_grad)
    return ops


#: every piece counted in this process (see :func:`count_ops`)
_COUNTED_OPS: dict[tuple, PieceOps] = {}


def _count_ops_on_meta(module: nn.Module, input_shape: tuple[int, ...], *, backward: bool,
                       input_requires_grad: bool) -> PieceOps:
    """:func:`count_ops` of one piece: recorded at both :data:`COUNT_BATCHES` and split."""
    piece = copy.deepcopy(module).to("meta", memory_format=torch.contiguous_format).train()
    skip = {id(t) for t in (*piece.parameters(), *piece.buffers())}
    runs = [_record(piece, batch, input_shape, skip, backward=backward,
                    input_requires_grad=input_requires_grad) for batch in COUNT_BATCHES]
    (fwd_a, bwd_a, out_shape), (fwd_b, bwd_b, _) = runs
    params = list(module.parameters())
    return PieceOps(forward=_split(fwd_a, fwd_b), backward=_split(bwd_a, bwd_b),
                    params=sum(p.numel() for p in params),
                    param_tensors=sum(p.requires_grad for p in params),
                    output_shape=out_shape)


class _DropGradient(torch.autograd.Function):
    """A copy of the input whose backward discards the gradient: the piece's input
    gradient is computed, but not accumulated into a leaf (that is the count's own
    bookkeeping), and the copy is not a leaf, so in-place operators may use it."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return None


def _record(piece: nn.Module, batch: int, input_shape: tuple[int, ...], skip: set[int], *,
            backward: bool, input_requires_grad: bool):
    """The forward's and backward's records of ``piece`` at ``batch`` and the per-sample
    output shape."""
    for p in piece.parameters():
        p.grad = None  # as after zero_grad(set_to_none=True): gradients are taken over
    x = torch.empty(batch, *input_shape, device="meta", requires_grad=input_requires_grad)
    if input_requires_grad:
        x = _DropGradient.apply(x)
    with sdpa_kernel(SDPBackend.MATH):
        with _Recorder(skip) as forward:
            out = piece(x)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"count_ops: {type(piece).__name__} returned "
                            f"{type(out).__name__}, not one tensor")
        records = []
        if backward and out.requires_grad:
            grad = torch.ones_like(out)
            with _Recorder(skip) as back:
                out.backward(grad)
            records = back.records
    return forward.records, records, tuple(out.shape[1:])


def _split(a: list, b: list) -> OpList:
    """Per-sample and fixed parts from the records at the two batch sizes."""
    names = tuple(r[0] for r in a)
    if names != tuple(r[0] for r in b):
        raise RuntimeError("count_ops: the piece ran different operators at batch sizes "
                           f"{COUNT_BATCHES[0]} and {COUNT_BATCHES[1]}")
    if not names:
        return OpList.empty()
    va = np.array([r[3:] for r in a], dtype=np.float64).reshape(-1, 2)
    vb = np.array([r[3:] for r in b], dtype=np.float64).reshape(-1, 2)
    per_sample = (vb - va) / (COUNT_BATCHES[1] - COUNT_BATCHES[0])
    fixed = va - per_sample * COUNT_BATCHES[0]
    if (per_sample < 0).any() or (fixed < 0).any():
        raise RuntimeError("count_ops: an operator's work is not of the form "
                           "per_sample * batch + fixed")
    return OpList(op_class=[r[1] for r in a], pointwise=[r[2] for r in a],
                  flops_per_sample=per_sample[:, 0],
                  flops_fixed=fixed[:, 0], bytes_per_sample=per_sample[:, 1],
                  bytes_fixed=fixed[:, 1], names=names)


def _distinct_numel(t: torch.Tensor) -> int:
    """Elements of ``t`` in memory: a zero stride (an ``expand``) repeats one."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return 0
        if stride != 0:
            n *= size
    return n


def _is_pointwise(bound: dict) -> bool:
    """A convolution (forward or backward, its bound arguments) with a 1x1 kernel,
    stride 1, no dilation, not transposed (:attr:`OpList.pointwise`)."""
    kernel = tuple(bound["weight"].shape[2:])
    ones = lambda v: all(int(x) == 1 for x in v)  # noqa: E731
    return (ones(kernel) and ones(bound["stride"]) and ones(bound["dilation"])
            and not bool(bound["transposed"]))


def _bind(func, args, kwargs) -> dict:
    """The operator's arguments by schema name."""
    bound = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


class _Recorder(TorchDispatchMode):
    """Records ``(name, class, pointwise, flops, bytes)`` of every operator (see the
    module doc and :attr:`OpList.pointwise`)."""

    def __init__(self, skip: set[int]) -> None:
        super().__init__()
        self.skip = skip  # ids of the piece's parameters and buffers
        self.records: list[tuple[str, int, bool, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        # no decomposition (FlopCounterMode decomposes implicit composites into their
        # parts): an operator is recorded as the dispatcher hands it to a CPU kernel
        # (native_batch_norm, silu_backward), one kernel, not the dozen element-wise ops
        # of its decomposition
        out = func(*args, **kwargs)
        if not (func.is_view or packet in NOT_OPERATORS):
            self._record(func, packet, args, kwargs, out)
        return out

    def _record(self, func, packet, args, kwargs, out) -> None:
        schema_args = func._schema.arguments
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        bound = _bind(func, args, kwargs)
        read, written = [], {id(t): t for t in outputs}
        for arg in schema_args:
            value = bound.get(arg.name)
            tensors = [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
            if arg.alias_info is not None and arg.alias_info.is_write:
                written.update((id(t), t) for t in tensors)
            if not arg.is_out:
                read.extend(tensors)
        if packet is aten.native_batch_norm and bound.get("training"):
            # its schema does not say so, but it updates the running statistics in place
            for name in ("running_mean", "running_var"):
                if isinstance(bound.get(name), torch.Tensor):
                    written[id(bound[name])] = bound[name]
        if not written:
            return  # a metadata query: no tensor out
        nbytes = sum(_distinct_numel(t) * t.element_size() for t in read)
        nbytes += sum(_distinct_numel(t) * t.element_size() for t in written.values())
        pointwise = False
        if packet in _CONV_FORWARD | _CONV_BACKWARD:
            pointwise = _is_pointwise(bound)
        if packet in _CONV_FORWARD:
            op_class = GROUPED_CONV if int(bound["groups"]) > 1 else CONV
            flops = conv_flops(bound["input"].shape, bound["weight"].shape, out.shape,
                               transposed=bool(bound["transposed"]))
        elif packet in _CONV_BACKWARD:
            op_class = GROUPED_CONV if int(bound["groups"]) > 1 else CONV
            flops = conv_flops(bound["input"].shape, bound["weight"].shape,
                               bound["grad_output"].shape,
                               transposed=bool(bound["transposed"]),
                               output_mask=tuple(bound["output_mask"]))
        elif packet in _OTHER_CONV_FORMULAS:
            op_class = GROUPED_CONV if int(bound.get("groups", 1)) > 1 else CONV
            flops = _OTHER_CONV_FORMULAS[packet](*args, **kwargs, out_val=out)
        elif packet in _MATMUL_FORMULAS:
            op_class = MATMUL
            flops = _MATMUL_FORMULAS[packet](*args, **kwargs, out_val=out)
        else:
            op_class = ELEMENTWISE
            touched = [t for t in read if not self._is_state(t)] + list(written.values())
            flops = max((_distinct_numel(t) for t in touched), default=0)
        self.records.append((str(func), op_class, pointwise, int(flops), int(nbytes)))

    def _is_state(self, t: torch.Tensor) -> bool:
        """A parameter or buffer of the piece (or a view of one)."""
        return id(t) in self.skip or (t._base is not None and id(t._base) in self.skip)
