"""How an algorithm's torch work runs on the host, apart from the simulated round protocol.

* :func:`run_ahead` and :func:`host_threads`: independent torch work (clients that
  train without waiting for the server, test batches) on several host threads, one
  torch thread each, bit-identical to a serial run with one torch thread
  (``training.parallel_clients``).
* :func:`eval_mode` and :func:`accuracy`: measurements of a model (evaluation, the
  early-exit passes, FedSGA's probes) that change nothing in it.

The round protocol itself (clients, hooks, training steps paired with their
simulated costs, the round deadline) is :mod:`sflsim.algorithms.base`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

import torch
from torch import nn

T = TypeVar("T")


def run_ahead(jobs: Sequence[Callable[[Callable[[], None]], T]], workers: int,
              report: Callable[[], None] | None = None) -> list[T]:
    """Run independent training jobs of a round before it is simulated, on at most
    ``workers`` host threads (:func:`host_threads`; ``training.parallel_clients``);
    returns their results in order.

    Each job gets a ``step_done()`` callback to call once per training batch; every
    call is passed on to ``report`` (e.g. the progress bar's advance), from the calling
    thread; with ``report`` None the caller reports the batches itself. Jobs must not
    share mutable state (each client's models, optimizer and generator are its own)
    and must not draw from torch's global random generator.

    Raises:
        whatever a job raises (the first one); the jobs not started are cancelled.
    """
    report = report if report is not None else _no_batch
    with host_threads(min(workers, len(jobs))) as pool:
        if pool is None:
            return [job(report) for job in jobs]
        lock, done = threading.Lock(), [0]

        def step_done() -> None:
            with lock:
                done[0] += 1

        futures = [pool.submit(job, step_done) for job in jobs]
        reported, pending = 0, futures
        while pending:
            _, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
            for _ in range(done[0] - reported):
                report()
            reported = done[0]
            if any(f.done() and f.exception() for f in futures):
                break
        return [f.result() for f in futures]


def step_batched(plans: dict[int, list[torch.Tensor]],
                 fuse: Callable[[tuple[int, ...]], object],
                 train_batch: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
                 record: Callable[[int, torch.Tensor | None, torch.Tensor], None],
                 alone: Callable[[int, torch.Tensor], tuple[torch.Tensor | None, torch.Tensor]]
                 | None = None) -> None:
    """Train clients step by step with their step ``j`` batched: for each ``j``, the
    clients of ``plans`` (``{client_id: [index batch, ...]}``) whose batch ``j`` has one
    size take one step of ``fuse(ids)`` (a :class:`sflsim.models.fused.FusedClients`
    over them, kept while the same clients step together and written back when they
    change, and at the end); a client alone at its size takes ``alone(id, batch)`` when
    given (else a one-client fused step). ``record(id, activations, loss)`` gets every
    step's client-side output (the fused step's detached activations ``(B, C', H', W')``,
    or what ``alone`` returned first) and mean loss (a 0-d tensor), in each client's step
    order; ``alone`` returns ``(activations or None, loss)``."""
    fused, fused_ids = None, ()
    for j in range(max((len(b) for b in plans.values()), default=0)):
        by_size: dict[int, list[int]] = {}
        for cid, batches in plans.items():
            if j < len(batches):
                by_size.setdefault(len(batches[j]), []).append(cid)
        for ids in map(tuple, by_size.values()):
            if ids != fused_ids and fused is not None:
                fused.write_back()  # the clients' own modules are current again
                fused, fused_ids = None, ()
            if len(ids) == 1 and alone is not None:
                record(ids[0], *alone(ids[0], plans[ids[0]][j]))
                continue
            if fused is None:
                fused, fused_ids = fuse(ids), ids
            xs, ys = zip(*(train_batch(plans[i][j], i) for i in ids))
            acts, losses = fused.step(list(xs), list(ys))
            for i, h, loss in zip(ids, acts, losses):
                record(i, h, loss)
    if fused is not None:
        fused.write_back()


def _no_batch() -> None:
    """A progress callback that reports nothing."""


@contextlib.contextmanager
def host_threads(workers: int) -> Iterator[ThreadPoolExecutor | None]:
    """A pool of ``workers`` host threads for independent torch work, or None for one.

    While the pool lives torch runs one intra-op thread, so each task computes
    exactly what it computes alone with ``--threads 1``: results are bit-identical
    to a serial run with one torch thread, in any thread interleaving. On exit the
    pool waits for running tasks, cancels queued ones and restores torch's thread
    count.
    """
    if workers <= 1:
        yield None
        return
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="sflsim-host")
    torch.set_num_threads(1)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)


@contextlib.contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Put ``modules`` and all their submodules in eval mode; on exit (also on an
    exception) give every submodule back its own previous mode.

    Every measurement of a model (evaluation, the early-exit passes, FedSGA's
    observation and calibration probes) runs under it, so it reads the model as
    trained (BatchNorm normalises with its running statistics, dropout is off)
    and changes nothing: in train mode a forward pass, even under
    ``torch.no_grad`` or ``torch.inference_mode``, would update BatchNorm's running
    statistics. A submodule that was in eval mode before stays so; a module
    reachable through several of ``modules`` is handled once.

    Example::

        with eval_mode(body, exit_head, server), torch.inference_mode():
            logits = server(body(x))
    """
    modes: dict[int, tuple[nn.Module, bool]] = {}
    for module in modules:
        for sub in module.modules():
            modes.setdefault(id(sub), (sub, sub.training))
    try:
        for module in modules:
            module.eval()
        yield
    finally:
        for sub, mode in modes.values():
            sub.training = mode


@torch.inference_mode()
def accuracy(body: nn.Module, exit_head: nn.Module, server: nn.Module,
             batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """(server-side, exit-head) accuracy in [0, 1] of a split model over ``batches`` of
    (float32 images ``(B, C, H, W)``, normalised, labels ``(B,)``), e.g.
    :meth:`~sflsim.data.DatasetSplit.batches`, in eval mode (:func:`eval_mode`: every
    module's mode restored)."""
    server_ok = client_ok = n = 0
    with eval_mode(body, exit_head, server):
        for xb, yb in batches:
            h = body(xb)
            client_ok += int((exit_head(h).argmax(1) == yb).sum())
            server_ok += int((server(h).argmax(1) == yb).sum())
            n += len(yb)
    return server_ok / n, client_ok / n
