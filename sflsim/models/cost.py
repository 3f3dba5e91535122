"""Work of a model piece: FLOPs counted on the real modules, activation sizes.

FLOPs are counted with :class:`torch.utils.flop_counter.FlopCounterMode` on a
copy of the module on PyTorch's ``meta`` device, once per (key, per-sample input
shape), and scaled by batch size. On ``meta`` no kernel runs: only shapes are
propagated, so the count is the same on every host, whatever the module's device
or memory layout (a channels-last module counted with CPU kernels once crashed
inside oneDNN, see :mod:`sflsim.models.layout`), it is fast, and the trained
model (its BatchNorm running statistics included) is never touched.
Counts are kept for the process and on disk (:class:`DiskCounts`): a model counted
once is not counted again by later runs on the same host.
FLOPs are FLOPs: a multiply-add counts 2, so ``Linear(128, 64, bias=False)`` at
batch 1 is 16,384 forward FLOPs. The counter covers matrix multiplies, convolutions and
attention (counted on the math attention kernel); element-wise ops,
normalisation, bias additions and the optimizer update are not counted.

Convolutions are counted with :func:`conv_flops` (passed to the counter as a
``custom_mapping``, torch itself is not patched): exact for grouped and depthwise
convolutions, forward and backward. torch's own formula counts the weight gradient of a
convolution with ``groups`` groups ``groups`` times over, as if it were dense (a 3x3
depthwise convolution of 96 channels at 112x112: backward / forward 97 instead of 2 with
the input's gradient); its forward and input-gradient counts are exact, and for
``groups == 1`` all three equal :func:`conv_flops`'s.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten

_COUNT_BATCH = 2  # per-sample counts are the batch's over 2


@dataclass(frozen=True)
class PieceCost:
    """Per-sample cost of one model piece.

    Attributes:
        forward_flops: forward FLOPs per sample.
        backward_flops: backward FLOPs per sample (0 when not trained).
        output_shape: per-sample output shape, e.g. ``(C, H, W)`` activations.
        params: number of parameters of the piece.
    """

    forward_flops: float
    backward_flops: float
    output_shape: tuple[int, ...]
    params: int

    @property
    def output_numel(self) -> int:
        n = 1
        for d in self.output_shape:
            n *= d
        return n

    def train_flops(self, batch: int) -> float:
        """Forward + backward FLOPs of a training step on ``batch`` samples."""
        return (self.forward_flops + self.backward_flops) * batch

    def infer_flops(self, batch: int) -> float:
        """Forward FLOPs of ``batch`` samples."""
        return self.forward_flops * batch


def count_flops(
    module: nn.Module, input_shape: tuple[int, ...], *, backward: bool = True,
    input_requires_grad: bool = False,
) -> PieceCost:
    """Count forward (and backward) FLOPs per sample of ``module``.

    An ``nn.Sequential`` is counted child by child (FLOPs add up along a chain; a
    child's input needs its gradient when the chain's input does or a parameter before
    it trains), and each piece's count is kept for the life of the process, keyed by
    the piece's structure (class, ``repr``, every submodule's plain attributes, parameter
    shapes and which of them train)
    and the input: the stages a run's client-side and server-side models share are
    counted once, and a sweep's runs in one process count nothing twice; and on disk
    (:class:`DiskCounts`), so later processes count nothing twice either.

    Args:
        module: the piece; it is deep-copied to the ``meta`` device, the original
            is not run. Its forward must not branch on tensor values.
        input_shape: per-sample input shape, e.g. ``(C, H, W)``.
        backward: also count the backward pass of ``output.sum()``.
        input_requires_grad: count the gradient w.r.t. the input (needed when
            activation gradients are sent back to a client).

    Returns:
        A :class:`PieceCost` with per-sample FLOPs and output shape.
    """
    if type(module) is nn.Sequential and len(module) > 1:  # a plain chain, not a subclass
        forward = back = 0.0
        shape, needs_grad = tuple(input_shape), input_requires_grad
        for child in module:
            cost = count_flops(child, shape, backward=backward, input_requires_grad=needs_grad)
            forward, back = forward + cost.forward_flops, back + cost.backward_flops
            shape = cost.output_shape
            needs_grad = needs_grad or any(p.requires_grad for p in child.parameters())
        return PieceCost(forward_flops=forward, backward_flops=back, output_shape=shape,
                         params=sum(p.numel() for p in module.parameters()))
    key = piece_key(module, input_shape, backward=backward,
                    input_requires_grad=input_requires_grad)
    cost = _COUNTED.get(key)
    if cost is None:
        disk_key = DISK_COUNTS.key(key, module)
        cost = DISK_COUNTS.get(disk_key)
        if cost is None:
            cost = _count_on_meta(module, input_shape, backward=backward,
                                  input_requires_grad=input_requires_grad)
            DISK_COUNTS.put(disk_key, cost)
        _COUNTED[key] = cost
    return cost


def piece_key(module: nn.Module, input_shape: tuple[int, ...], *, backward: bool,
              input_requires_grad: bool) -> tuple:
    """The in-process cache key of a piece and its input (:func:`count_flops`,
    :func:`sflsim.models.ops.count_ops`).

    The piece's structure: its class, ``repr``, every submodule's plain attributes (a
    forward may read one that ``repr`` does not show, such as a path's cut), parameter
    shapes and which of them train, buffer shapes; then the per-sample input shape and
    the two flags. Two pieces with the same key run the same operators on the same
    shapes.
    """
    return (type(module).__module__, type(module).__qualname__, repr(module),
            tuple(tuple(sorted((k, v) for k, v in vars(m).items() if k != "training"
                               and isinstance(v, (bool, int, float, str, tuple))))
                  for m in module.modules()),
            tuple((tuple(p.shape), p.requires_grad) for p in module.parameters()),
            tuple(tuple(b.shape) for b in module.buffers()),
            tuple(input_shape), backward, input_requires_grad)


def _prod(values) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n


def conv_flops(x_shape, w_shape, out_shape, *, transposed: bool = False,
               output_mask: tuple[bool, bool, bool] | None = None) -> int:
    """Exact FLOPs of a convolution, or of its backward, grouped or not.

    A convolution's weight has shape ``(C_out, C_in / groups, *kernel)`` (transposed:
    ``(C_in, C_out / groups, *kernel)``), so each of its elements meets one input element
    per sample and per point of the output (transposed: of the input) grid: the forward
    is ``2 * B * prod(grid) * weight.numel()`` FLOPs, which for a plain convolution is
    ``2 * B * C_out * H_out * W_out * (C_in / groups) * kh * kw``. The gradient w.r.t.
    the input and the one w.r.t. the weight are each one more such product: the same
    count each. As in torch's formulas, the bias addition and the bias gradient (a sum
    of the output gradient) are not counted, and products with the padding's zeros are.

    Args:
        x_shape: the input's shape ``(B, C_in, *spatial)``.
        w_shape: the weight's shape.
        out_shape: the output's shape ``(B, C_out, *spatial)``.
        transposed: a transposed convolution.
        output_mask: for the backward, which of (input, weight, bias) gradients are
            computed (``convolution_backward``'s ``output_mask``); ``None``: the forward.

    Returns:
        FLOPs (2 per multiply-add).
    """
    grid = (x_shape if transposed else out_shape)[2:]
    one = 2 * int(x_shape[0]) * _prod(grid) * _prod(w_shape)
    if output_mask is None:
        return one
    return one * (bool(output_mask[0]) + bool(output_mask[1]))


def _conv_forward_formula(x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                          *args, out_shape=None, **kwargs) -> int:
    """``aten.convolution`` / ``_convolution`` for FlopCounterMode (shapes in)."""
    return conv_flops(x_shape, w_shape, out_shape, transposed=bool(transposed))


def _conv_backward_formula(grad_out_shape, x_shape, w_shape, _bias_sizes, _stride, _padding,
                           _dilation, transposed, _output_padding, _groups, output_mask,
                           out_shape=None, **kwargs) -> int:
    """``aten.convolution_backward`` for FlopCounterMode (shapes in)."""
    return conv_flops(x_shape, w_shape, grad_out_shape, transposed=bool(transposed),
                      output_mask=tuple(output_mask))


#: formula overrides passed as FlopCounterMode's ``custom_mapping`` (see :func:`conv_flops`)
FLOP_OVERRIDES = {
    aten.convolution: _conv_forward_formula,
    aten._convolution: _conv_forward_formula,
    aten.convolution_overrideable: _conv_forward_formula,
    aten.convolution_backward: _conv_backward_formula,
}


#: every piece counted in this process (see :func:`count_flops`)
_COUNTED: dict[tuple, PieceCost] = {}


class DiskCounts:
    """:func:`count_flops`'s counts kept on disk across processes, one JSON line per
    piece in ``flop_counts.jsonl`` under ``$SFLSIM_CACHE_DIR`` (default
    ``$XDG_CACHE_HOME/sflsim``, else ``~/.cache/sflsim``; ``SFLSIM_CACHE_DIR=off``
    keeps counts in the process only).

    A count is keyed by the piece's structure and input (as in the process), torch's
    version, and the source files of this module and of every class in the piece
    (so a count is never reused after the code of a forward changes). Lines are
    appended (concurrent runs may share the file); a line that does not parse is
    ignored; a file over :attr:`MAX_BYTES` is started afresh. Reading or writing the
    file never fails a run: without a usable folder counts stay in the process.
    """

    FILE = "flop_counts.jsonl"
    MAX_BYTES = 8 * 2**20

    def __init__(self) -> None:
        self.counts: dict[str, PieceCost] | None = None  # read on first use
        self.path: Path | None = None
        self._digests: dict[str, str] = {}

    def folder(self) -> Path | None:
        """The cache folder, or None when disabled."""
        value = os.environ.get("SFLSIM_CACHE_DIR")
        if value is not None:
            return None if value.strip().lower() in ("", "off", "0", "none") else Path(value)
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return Path(base) / "sflsim"

    def key(self, key: tuple, module: nn.Module) -> str:
        """The disk key of the process key ``key`` of ``module``."""
        sources = sorted({self._digest(type(m)) for m in module.modules()})
        text = repr((torch.__version__, self._digest(PieceCost), sources, key))
        return hashlib.sha256(text.encode()).hexdigest()

    def _digest(self, cls: type) -> str:
        """A digest of the file that defines ``cls`` (its name when there is none)."""
        mod = sys.modules.get(cls.__module__)
        file = getattr(mod, "__file__", None)
        if file is None:
            return f"{cls.__module__}.{cls.__qualname__}"
        digest = self._digests.get(file)
        if digest is None:
            try:
                digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16]
            except OSError:
                digest = f"{file}:unreadable"
            self._digests[file] = digest
        return digest

    def _load(self) -> dict[str, PieceCost]:
        if self.counts is not None and self.path == self._file():
            return self.counts
        self.path, self.counts = self._file(), {}
        if self.path is None:
            return self.counts
        try:
            if self.path.stat().st_size > self.MAX_BYTES:
                self.path.unlink()
                return self.counts
            lines = self.path.read_text().splitlines()
        except OSError:
            return self.counts
        for line in lines:
            try:
                k, f, b, shape, params = json.loads(line)
                self.counts[k] = PieceCost(float(f), float(b), tuple(shape), int(params))
            except (ValueError, TypeError):
                continue
        return self.counts

    def _file(self) -> Path | None:
        folder = self.folder()
        return None if folder is None else folder / self.FILE

    def get(self, disk_key: str) -> PieceCost | None:
        return self._load().get(disk_key)

    def put(self, disk_key: str, cost: PieceCost) -> None:
        counts = self._load()
        if self.path is None:  # no cache folder: the process's own counts only
            return
        counts[disk_key] = cost
        line = json.dumps([disk_key, cost.forward_flops, cost.backward_flops,
                           list(cost.output_shape), cost.params]) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())  # one write: appended whole
            finally:
                os.close(fd)
        except OSError:
            pass


#: the counts on disk (see :class:`DiskCounts`)
DISK_COUNTS = DiskCounts()


def _count_on_meta(module: nn.Module, input_shape: tuple[int, ...], *, backward: bool,
                   input_requires_grad: bool) -> PieceCost:
    """:func:`count_flops` of one piece, counted on a ``meta`` copy of it in eval mode
    (normalisation and dropout are not counted, so the mode changes no count; eval mode
    runs fewer operators: resnet18's forward takes 22 ms on ``meta`` in eval mode, 41 ms
    in train mode, torch 2.14)."""
    # shapes only: FLOPs depend on neither the device nor the memory layout
    piece = copy.deepcopy(module).to("meta", memory_format=torch.contiguous_format).eval()
    x = torch.empty(_COUNT_BATCH, *input_shape, device="meta", requires_grad=input_requires_grad)
    if input_requires_grad:  # not a leaf, as inside a chain: in-place ops (ReLU) may use it
        x = x.clone()
    # the math attention kernel is the one FlopCounterMode has formulas for
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False, custom_mapping=FLOP_OVERRIDES) as counter:
            out = piece(x)
        forward = counter.get_total_flops()
        back = 0
        if backward and out.requires_grad:
            with FlopCounterMode(display=False, custom_mapping=FLOP_OVERRIDES) as counter:
                out.float().sum().backward()
            back = counter.get_total_flops()
    return PieceCost(
        forward_flops=forward / _COUNT_BATCH,
        backward_flops=back / _COUNT_BATCH,
        output_shape=tuple(out.shape[1:]),
        params=sum(p.numel() for p in module.parameters()),
    )


class CostTable:
    """Cache of :func:`count_flops` results keyed by a caller-chosen name and shape."""

    def __init__(self) -> None:
        self._cache: dict[tuple, PieceCost] = {}

    def cost(
        self, key: str, module: nn.Module, input_shape: tuple[int, ...], *,
        backward: bool = True, input_requires_grad: bool = False,
    ) -> PieceCost:
        """Cost of ``module`` under ``key``; counted on the first call only."""
        k = (key, tuple(input_shape), backward, input_requires_grad)
        cost = self._cache.get(k)
        if cost is None:
            cost = self._cache[k] = count_flops(
                module, input_shape, backward=backward, input_requires_grad=input_requires_grad
            )
        return cost
