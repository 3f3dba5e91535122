"""Scoring personalised models two ways: on each client's own test distribution, as the
papers of FedBABU (Oh et al., ICLR 2022), FedGH (Yi et al., ACM MM 2023) and FedAS (Yang
et al., CVPR 2024) test, and on the test set as it is, as the other algorithms' global
models are scored.

sflsim has one shared test set. A client's own test distribution is that test set
reweighted to the client's training label distribution: the per-class test accuracies of
its model weighted by its training labels (the expected accuracy on test data with the
client's labels). Classes missing from the evaluated test subset are left out; a client
none of whose classes is in it is scored on the whole subset.

``test_distribution`` (``client`` or ``global``) picks the score that becomes the
client's ``server_accuracy``; both go to the clients table (:data:`SCORE_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

#: the clients-table columns of a personalised algorithm's evaluated rounds
SCORE_COLUMNS = ("accuracy_own_distribution", "accuracy_global")


def class_counts(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                 classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class correct predictions and test samples of ``model`` (``(B, ...) ->
    (B, classes)`` logits) over ``batches`` of ``(x, y)``; both ``(classes,)`` float64 on
    the CPU. Runs under :func:`torch.inference_mode`; the caller sets eval mode."""
    correct = total = None
    with torch.inference_mode():
        for xb, yb in batches:
            hit = model(xb).argmax(1) == yb
            c = torch.bincount(yb[hit], minlength=classes)
            t = torch.bincount(yb, minlength=classes)
            correct = c if correct is None else correct + c
            total = t if total is None else total + t
    if correct is None:
        return torch.zeros(classes, dtype=torch.float64), torch.zeros(classes, dtype=torch.float64)
    return correct.double().cpu(), total.double().cpu()


def two_scores(correct: torch.Tensor, total: torch.Tensor, labels: torch.Tensor
               ) -> tuple[float, float]:
    """``(own distribution, global)`` accuracy in [0, 1] from per-class ``correct`` and
    ``total`` ``(classes,)`` and the client's training ``labels`` ``(n,)`` (module
    docstring)."""
    glob = float(correct.sum() / total.sum()) if total.sum() > 0 else float("nan")
    weights = torch.bincount(labels.cpu(), minlength=len(total)).double() * (total > 0)
    if weights.sum() == 0:
        return glob, glob
    own = float((weights * correct / total.clamp(min=1)).sum() / weights.sum())
    return own, glob


class PersonalScores:
    """The scores of the last evaluation, per client, until the clients table takes them.

    Args:
        test_distribution: ``client`` or ``global``: which score :meth:`keep` returns.

    Raises:
        ValueError: another ``test_distribution``.
    """

    def __init__(self, test_distribution: str) -> None:
        if test_distribution not in ("client", "global"):
            raise ValueError(f"test_distribution must be client or global, got "
                             f"{test_distribution!r}")
        self.test_distribution = test_distribution
        self.last: dict[int, tuple[float, float]] = {}

    def keep(self, client_id: int, correct: torch.Tensor, total: torch.Tensor,
             labels: torch.Tensor) -> float:
        """Score client ``client_id`` both ways (:func:`two_scores`), keep both, return the
        one ``test_distribution`` picks. Safe from several host threads (one key each)."""
        own, glob = two_scores(correct, total, labels)
        self.last[client_id] = (own, glob)
        return own if self.test_distribution == "client" else glob

    def clear(self) -> None:
        """Forget the kept scores (at the start of a round: round 0's, or an earlier
        round's, are not this round's)."""
        self.last = {}

    def columns(self, client_ids: Iterable[int]) -> dict[int, dict[str, float]]:
        """The clients-table columns of the round: the scores kept since the round began
        (every client is scored at each evaluation), NaN for a round without evaluation;
        handed over once."""
        nan = float("nan")
        out = {cid: dict(zip(SCORE_COLUMNS, self.last.get(cid, (nan, nan))))
               for cid in client_ids}
        self.clear()
        return out
