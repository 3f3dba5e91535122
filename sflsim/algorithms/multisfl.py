"""MultiSFL: branch models, a master model, knowledge replay, and cuts by device resources.

Paper: Xia, Hu, Yan, Liu, Li, Xie, Chen, "MultiSFL: Towards Accurate Split
Federated Learning via Multi-Model Aggregation and Knowledge Replay", AAAI 2025,
39(1):914-922; preprint arXiv 2404.12846 ("KoReA-SFL"). The paper's full text
was not at hand; where it is silent here, this module follows the authors' code
(github.com/CodeFree-xzk/MultiSFL, ``Algorithm/Training_MultiSFL.py`` and
``LocalUpdate_MultiSFL`` in ``models/Update.py``). FedSGA (CIKM 2026, arXiv
2608.15639, §4.1.2, Table 5) uses it as the adaptive-SFL baseline that "dynamically adjusts split
strategies according to heterogeneous client resources".

A round (``K = num_branches`` full models, "branches", kept by the server):

1. **Cuts.** The split policy picks each client's cut; by default ``resource``:
   the deepest candidate whose estimated round time on the device fits
   ``round_budget_s`` (:mod:`sflsim.algorithms.split_policy`).
2. **Groups.** The clients, in a seeded random order, are dealt round-robin to
   the K branches; every client trains exactly one branch per round.
3. **Scores and quotas.** Each branch's score vector is the exponentially
   decayed average (decay ``score_decay``) of the label distributions it has
   trained on, this round's clients included. Classes below the mean score are
   under-represented; the branch asks for ``max(replay_min_samples,
   round(p * n_b))`` replay samples (``n_b`` its clients' samples, ``p`` the
   replay fraction), split over those classes in proportion to their deficit
   (largest-remainder rounding).
4. **Assistants.** Among the clients of the other branches, greedily: take the
   device that can supply the most still-needed samples (ties: lower id), take
   what it has of each class up to the remaining quota, repeat until the quotas
   are met, nobody can help, or ``max_assistants`` are chosen. The server is
   assumed to know every client's label counts (as in the authors' code).
5. **Replay** (on each assistant, before its own training): download the
   branch's client-side part at the assistant's own cut, run it forward on the
   chosen samples (eval mode), send the activations up; the branch's
   server-side part trains on them (activity ``server_replay``) when they
   arrive. No gradient returns to the assistant. All of it is charged in
   simulated time, FLOPs and bytes.
6. **Branch training** is SplitFed V2 per branch: the client downloads the
   branch's stages ``1..k``, sends activations, the branch's server-side part
   trains in order of simulated arrival (one lock per branch, one optimizer per
   branch that persists across rounds) and returns activation gradients.
7. **Aggregation** (round end): each branch becomes the layer-wise
   sample-weighted average of what trained it (its clients' client-side copies
   and its own server-side part, replay samples counted where they trained);
   the **master** (``global_model``, the one evaluated) is the average of the
   branches weighted by their clients' samples; then every branch moves towards
   the master: ``branch <- (1 - master_pull) * branch + master_pull * master``.
8. **Adaptive replay.** The federated gradient norm of the round is
   ``lr * mean over branches of the mean squared gradient norm per client step``
   (client and server parts). If its mean over the last 10 rounds rose above the
   mean over the 10 rounds before the last one (a "critical learning period"),
   the replay fraction doubles (at most ``replay_fraction_max``), else it halves
   (at least ``replay_fraction``).

Deviations from the paper (and the authors' code):

* Participation: the code picks ``K`` random clients per round, one per branch,
  and asks the idle ones for replay. Here the round's participants (every client,
  or ``training.clients_per_round`` of them) are dealt to the branches, so branches
  are groups of clients and assistants come from the other branches' participants
  and replay before their own training; clients not sampled do not replay. With
  ``num_branches`` equal to the clients sampled each branch has one client, as in
  the code (fewer participants than branches: the extra branches sit the round
  out). A client dropped by ``conditions`` neither trains nor replays that
  round; branches and the master average only the copies that arrived (a branch
  nobody trained is left out of the master).
* Assistant choice: the code walks the other clients in random order; here the
  richest supplier of the missing classes is taken first (step 4), and
  ``max_assistants`` can cap them.
* Replay happens once per round with the branch's client-side part at the start
  of the assistant's replay, and trains as server steps of its own (batches of
  at most ``batch_size``); the code recomputes it every local epoch and
  concatenates it with the branch client's batches. Replay samples are drawn at
  random (the code's optional "boundary sampling" is not implemented).
* The score is a decayed average of label *proportions*; the code decays raw
  label counts with its own normalisation. The quota is ``max(min, round(p *
  n_b))`` over the branch's clients; the code uses ``max(classes, int(p * n))``.
* Adaptive replay follows the code's ``DB=1`` rule, without its zero-padded
  start (it needs two rounds of history here) and without its +0.01 growth past
  the cap; the adaptive master weight (``AW``) is not implemented: the pull is
  the constant ``master_pull`` (code: weight 1 against 10, i.e. 1/11).
* The master is sample-weighted (code: equal weights, one client per branch).
* The resource-driven split is FedSGA's description of MultiSFL, not part of
  MultiSFL's own method, which uses one fixed cut; its estimate leaves out
  replay work, which is not known when cuts are chosen.
* Optimizers: the configured optimizer; client-side optimizers are created per
  round, branch server optimizers persist (the code: SGD created per round).
  Labels on the wire and the label counts known to the server are not charged.

Replay losses are kept apart from the clients' server losses (``where =
"replay"`` in :attr:`Algorithm.losses`), so ``server_loss`` stays the loss on
the clients' own data.

Timing-only runs (``training.timing_only``) need a replay fraction that does not
follow training: ``adaptive_replay: false`` (or ``replay: false``, or
``replay_fraction_max`` equal to ``replay_fraction``). Branches, assistants and
replay samples are then drawn as in a trained run; the branches are views of the
global model (no copies).
"""

from __future__ import annotations

import copy
from collections import defaultdict

import numpy as np
import simpy
import torch
from torch import nn

from sflsim.algorithms.aggregation import average_into, weighted_average
from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process
from sflsim.errors import ConfigError
from sflsim.text import plural, span

#: Rounds of federated gradient norm compared by adaptive replay (authors' code: WIN = 10).
FGN_WINDOW = 10


def replay_quotas(score: np.ndarray, total: int) -> np.ndarray:
    """Split ``total`` replay samples over the classes scoring below the mean.

    Args:
        score: ``(C,)`` a branch's score vector (label proportions, sums to 1).
        total: samples to ask for.

    Returns:
        ``(C,)`` int64 quotas in proportion to ``max(mean(score) - score_c, 0)``,
        summing to ``total`` (largest remainder, ties to the lower class id), or
        zeros when ``total <= 0`` or no class is below the mean.
    """
    deficit = np.maximum(score.mean() - score, 0.0)
    quotas = np.zeros(len(score), dtype=np.int64)
    if total <= 0 or deficit.sum() <= 0:
        return quotas
    share = total * deficit / deficit.sum()
    quotas[:] = np.floor(share)
    order = np.lexsort((np.arange(len(score)), -(share - quotas)))
    quotas[order[: total - int(quotas.sum())]] += 1
    return quotas


def choose_assistants(quotas: np.ndarray, label_counts: dict[int, np.ndarray],
                      candidates: list[int], max_assistants: int | None = None
                      ) -> dict[int, np.ndarray]:
    """Greedily pick the devices that supply the most still-needed samples.

    Args:
        quotas: ``(C,)`` samples wanted per class.
        label_counts: ``{client_id: (C,) samples per class}``.
        candidates: client ids that may assist.
        max_assistants: at most this many (None: no limit).

    Returns:
        ``{client_id: (C,) samples it sends per class}`` in the order chosen.
    """
    need = quotas.astype(np.int64).copy()
    pool = sorted(candidates)
    chosen: dict[int, np.ndarray] = {}
    while need.sum() > 0 and pool and (max_assistants is None or len(chosen) < max_assistants):
        supply = {a: np.minimum(label_counts[a], need) for a in pool}
        best = max(pool, key=lambda a: (int(supply[a].sum()), -a))
        if supply[best].sum() == 0:
            break
        chosen[best] = supply[best]
        need -= supply[best]
        pool.remove(best)
    return chosen


@register_algorithm("multisfl")
class MultiSFL(SplitFed):
    """MultiSFL: K SplitFed-V2 branches, a master model and knowledge replay (module docstring)."""

    shared_server = False  # SplitFed's single server model is not used; branches have their own

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        cfg = ctx.scenario.algorithm
        n = len(ctx.clients)
        self.num_branches = cfg.num_branches if cfg.num_branches is not None else min(4, n)
        if self.num_branches > n:
            raise ConfigError(f"algorithm.num_branches: {plural(self.num_branches, 'branch')} but "
                              f"only {plural(n, 'client')}; every branch needs a client each round, "
                              f"so use {span(1, n)}")
        self.cfg = cfg
        num_classes = ctx.data.num_classes
        self.replay_min_samples = (cfg.replay_min_samples if cfg.replay_min_samples is not None
                                   else num_classes)
        self.replay_fraction = cfg.replay_fraction
        if ctx.timing_only:  # nothing trains: every branch is the global model, no optimizer
            self.branches = [self.global_model] * self.num_branches
            self.branch_optimizers: list[torch.optim.Optimizer | None] = \
                [None] * self.num_branches
        else:
            self.branches = [copy.deepcopy(self.global_model) for _ in range(self.num_branches)]
            self.branch_optimizers = [self.round_optimizer(b.parameters(), 1)
                                      for b in self.branches]
        self.branch_locks = [FifoResource(self.sim.env) for _ in self.branches]
        y = ctx.data.y_train.cpu().numpy()
        self.label_counts = {c.client_id: np.bincount(y[c.indices], minlength=num_classes)
                             for c in ctx.clients}
        self.score_sum = np.zeros((self.num_branches, num_classes))
        self.score_weight = np.zeros(self.num_branches)
        split_seed = ctx.seeds.get("split", 0)
        self.group_rng = np.random.default_rng(np.random.SeedSequence(split_seed, spawn_key=(1,)))
        self.replay_rng = np.random.default_rng(np.random.SeedSequence(split_seed, spawn_key=(2,)))
        #: federated gradient norm of every round so far
        self.fgn_history: list[float] = []
        #: the replay fraction used in each round
        self.replay_fractions: list[float] = []
        self.groups: list[list[int]] = []
        self.branch_of: dict[int, int] = {}
        self.replay_plan: list[dict[int, np.ndarray]] = []

    # ----- planning ---------------------------------------------------------------------
    def assign_branches(self) -> None:
        """Deal the round's participants (every client but those not sampled or offline,
        :attr:`absent`), in a seeded random order, round-robin to the branches."""
        order = self.group_rng.permutation([c.client_id for c in self.ctx.clients
                                            if c.client_id not in self.protocol.conditions.absent])
        self.groups = [sorted(int(c) for c in order[b::self.num_branches])
                       for b in range(self.num_branches)]
        self.branch_of = {cid: b for b, group in enumerate(self.groups) for cid in group}

    def update_scores(self) -> np.ndarray:
        """Add this round's label distribution of every branch; returns ``(K, C)`` scores."""
        gamma = self.cfg.score_decay
        for b, group in enumerate(self.groups):
            if not group:  # fewer participants than branches: this one sits the round out
                continue
            counts = sum(self.label_counts[cid] for cid in group)
            self.score_sum[b] = gamma * self.score_sum[b] + counts / counts.sum()
            self.score_weight[b] = gamma * self.score_weight[b] + 1.0
        weight = self.score_weight[:, None]  # 0 for a branch that has had no client yet
        return np.divide(self.score_sum, weight, out=np.zeros_like(self.score_sum),
                         where=weight > 0)

    def plan_replay(self) -> dict[int, list[tuple[int, torch.Tensor]]]:
        """Choose assistants and samples for every branch (module docstring, steps 3-4).

        Returns:
            ``{assistant_id: [(branch, sample indices), ...]}`` in branch order.
        """
        scores = self.update_scores()
        self.replay_plan = [{} for _ in range(self.num_branches)]
        jobs: dict[int, list[tuple[int, torch.Tensor]]] = defaultdict(list)
        if not self.cfg.replay:
            return jobs
        y = self.ctx.data.y_train.cpu().numpy()
        for b in range(self.num_branches):
            if not self.groups[b]:
                continue
            total = max(self.replay_min_samples,
                        round(self.replay_fraction * samples_of(self.ctx.clients, self.groups[b])))
            quotas = replay_quotas(scores[b], total)
            others = [cid for cid in self.branch_of if self.branch_of[cid] != b]
            plan = choose_assistants(quotas, self.label_counts, others, self.cfg.max_assistants)
            self.replay_plan[b] = plan
            for cid, per_class in plan.items():
                indices = self.ctx.clients[cid].indices
                picks = [self.replay_rng.choice(indices[y[indices] == c], size=int(k), replace=False)
                         for c, k in enumerate(per_class) if k > 0]
                jobs[cid].append((b, torch.as_tensor(np.concatenate(picks))))
        return jobs

    # ----- one round --------------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        self.cost_model.cut_layers = self.policy.choose(round_)
        self.assign_branches()
        jobs = self.plan_replay()
        self.replay_fractions.append(self.replay_fraction)
        for optimizer in self.branch_optimizers:
            for group in optimizer.param_groups if optimizer is not None else ():
                group["lr"] = self.lr_for_round(round_)
        self.client_copies: dict[int, nn.Sequential] = {}
        #: per branch: {cut: replay samples its server-side part trained on at that cut}
        self.replay_trained: list[dict[int, int]] = [defaultdict(int) for _ in self.branches]
        self.grad_norms: list[list[float]] = [[] for _ in self.branches]
        self.pending: list[simpy.Process] = []

        def client_round(client: Client) -> Process:
            for b, idx in jobs.get(client.client_id, []):
                yield from self.send_replay(client, b, idx)
            yield from self.train_client(client, round_)

        yield from self.protocol.run_clients(client_round)
        if self.pending:
            yield self.sim.env.all_of(self.pending)

    def send_replay(self, assistant: Client, b: int, idx: torch.Tensor) -> Process:
        """Assistant side of knowledge replay for branch ``b``: download, forward, send."""
        cid, timing = assistant.client_id, self.ctx.timing_only
        cut = self.cost_model.cut_layers[cid]
        body = self.branches[b][:cut] if timing else copy.deepcopy(self.branches[b][:cut]).eval()
        # a branch is a copy of the global model: the same bytes
        yield from assistant.downlink.transfer("download_replay_model", cid,
                                               self.stage_bytes(0, cut))
        cost = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape,
                                   backward=False)
        for chunk in torch.split(idx, self.scenario.training.batch_size):
            n = len(chunk)
            yield from self.sim.compute(assistant.actor, "replay_forward", cid,
                                        cost.forward_flops * n, assistant.flops_per_s)
            if timing:  # a shape: no torch step runs
                h, y = self.cost_model.meta_tensor((n, *cost.output_shape)), None
            else:
                with torch.no_grad():
                    x, y = self.steps.train_batch(chunk, assistant.client_id)
                    h = body(x)
            yield from assistant.uplink.transfer("send_replay_activations", cid,
                                                 self.cost_model.payload_bytes(tuple(h.shape[1:]), n))
            self.pending.append(self.protocol.spawn(  # a round process: the deadline cuts it off
                assistant, self.train_replay(assistant, b, h, y)))

    def train_replay(self, assistant: Client, b: int, h: torch.Tensor, y: torch.Tensor) -> Process:
        """Server side of knowledge replay: branch ``b``'s server-side part trains on ``h``."""
        cut = self.cost_model.cut_layers[assistant.client_id]
        yield from self.steps.server_step(assistant, self.branches[b][cut:], self.branch_optimizers[b],
                                    h, y, self.branch_locks[b], "server_replay")
        if not self.ctx.timing_only:  # the step just recorded its loss; nothing ran between
            _, cid, loss, n = self.steps.losses[-1]
            self.steps.losses[-1] = ("replay", cid, loss, n)
        self.replay_trained[b][cut] += len(h)

    def train_client(self, client: Client, round_: int) -> Process:
        """SplitFed V2 on the client's branch; also records squared gradient norms
        (timing-only runs: views of the branch, no copy, no norms)."""
        cid, timing = client.client_id, self.ctx.timing_only
        cut = self.cost_model.cut_layers[cid]
        b = self.branch_of[cid]
        branch = self.branches[b]
        body = branch[:cut] if timing else copy.deepcopy(branch[:cut])
        yield from client.downlink.transfer("download_model", cid, self.stage_bytes(0, cut))
        optimizer = None if timing else self.round_optimizer(body.parameters(), round_)
        server = branch[cut:]
        cost = self.ctx.costs.cost(f"client_body:l{cut}", body, self.ctx.backbone.input_shape)
        for _epoch in range(self.scenario.training.local_epochs):
            for idx in self.batching.batches(client):
                server_sq: list[float] = []  # read right after the server's step, before
                # another client of this branch can overwrite its gradients
                yield from self.split_step(
                    client, idx, body, optimizer, cost, server, self.branch_optimizers[b],
                    self.branch_locks[b], after_server=None if timing else
                    lambda sq=server_sq: sq.append(_grad_sq_norm(server)))
                if not timing:
                    self.grad_norms[b].append(_grad_sq_norm(body) + server_sq[0])
        yield from client.uplink.transfer("upload_model", cid, self.stage_bytes(0, cut))
        if not timing:
            self.client_copies[cid] = body

    # ----- round end --------------------------------------------------------------------
    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """Aggregate each branch, the master from the branches, pull branches to the master."""
        for b in range(self.num_branches):
            self.aggregate_branch(b)
        self.aggregate_master()
        pull_towards(self.branches, self.global_model, self.cfg.master_pull)
        self.adapt_replay_fraction(round_)
        self.client_copies = {}

    @torch.no_grad()
    def aggregate_branch(self, b: int) -> None:
        """Layer-wise FedAvg of everything that trained branch ``b`` (as SplitFed V2)."""
        copies = getattr(self, "client_copies", None)  # None outside a round: every client
        samples = {cid: len(self.ctx.clients[cid].indices) for cid in self.groups[b]
                   if copies is None or cid in copies}  # dropped and late clients are left out
        for layer, target in enumerate(self.branches[b]):  # 0-based; the head is last
            states, weights = [], []
            for cid in samples:
                if layer < self.cost_model.cut_layers[cid]:
                    states.append(self.client_copies[cid][layer].state_dict())
                    weights.append(samples[cid])
            served = sum(n for cid, n in samples.items() if layer >= self.cost_model.cut_layers[cid])
            served += sum(n for cut, n in self.replay_trained[b].items() if layer >= cut)
            if served:
                states.append(target.state_dict())
                weights.append(served)
            if not states:  # nothing trained this layer of the branch this round
                continue
            mean = weighted_average(states, weights)
            for name, tensor in target.state_dict().items():
                tensor.copy_(mean[name])

    @torch.no_grad()
    def aggregate_master(self) -> None:
        """Master (``global_model``) = branches averaged by their clients' samples this round
        (clients whose upload arrived; branches nobody trained are left out)."""
        copies = getattr(self, "client_copies", None)  # None outside a round: every client
        weights = [sum(len(self.ctx.clients[cid].indices) for cid in self.groups[b]
                       if copies is None or cid in copies) for b in range(self.num_branches)]
        used = [b for b in range(self.num_branches) if weights[b] > 0]
        if used:
            average_into([self.branches[b] for b in used], [weights[b] for b in used],
                         target=self.global_model)

    @torch.no_grad()
    def adapt_replay_fraction(self, round_: int) -> None:
        """Double / halve the replay fraction as the federated gradient norm rises / falls."""
        per_branch = [float(np.mean(g)) for g in self.grad_norms if g]
        if not per_branch:  # no client step this round (all dropped or late): no measurement
            return
        self.fgn_history.append(self.lr_for_round(round_) * float(np.mean(per_branch)))
        if not self.cfg.adaptive_replay or len(self.fgn_history) < 2:
            return
        new = np.mean(self.fgn_history[-FGN_WINDOW:])
        old = np.mean(self.fgn_history[-FGN_WINDOW - 1:-1])
        if new > old:
            self.replay_fraction = min(self.cfg.replay_fraction_max, 2 * self.replay_fraction)
        else:
            self.replay_fraction = max(self.cfg.replay_fraction, self.replay_fraction / 2)


def _grad_sq_norm(module: nn.Module) -> float:
    """Squared L2 norm of the gradients held by ``module``'s parameters."""
    return float(sum(float(p.grad.pow(2).sum()) for p in module.parameters() if p.grad is not None))


def samples_of(clients: list[Client], group: list[int]) -> int:
    """Training samples of the clients ``group`` (ids) of ``clients``: a branch's data."""
    return sum(len(clients[cid].indices) for cid in group)


@torch.no_grad()
def pull_towards(branches: list[nn.Module], master: nn.Module, pull: float) -> None:
    """``branch <- (1 - pull) * branch + pull * master`` for every branch, in place
    (``master_pull``)."""
    state = master.state_dict()
    for branch in branches:
        mean = weighted_average([branch.state_dict(), state], [1.0 - pull, pull])
        for name, tensor in branch.state_dict().items():
            tensor.copy_(mean[name])
