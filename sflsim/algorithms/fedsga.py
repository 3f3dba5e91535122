"""FedSGA: adaptive split federated learning with client-specific sufficiency estimation.

Paper: Yuan et al., "When Is Shallow Enough? Adaptive Split Federated Learning
with Client-Specific Sufficiency Estimation", CIKM 2026
(``../shared/papers/000_...``), §3, Alg. 1-2, eqs. 2-10.

One round of client ``i`` (a SimPy process; every torch step runs when its
simulated work completes):

1. Download the client-side stages ``1..p_1`` of the global model (with
   ``client_fronts: local`` none: the client keeps its own), the prototypes
   and the projector. Forward one observation batch ``B`` to ``p_1`` (with the
   client's private prompts) and form ``o = [a, delta, q]``:
   ``a`` the mean cosine between ``phi_s(pool(h_p1))`` and the class
   prototypes of its labels (eq. 3), ``delta = ||H_t - H_{t-1}||`` of the mean
   pooled shallow representation (eq. 5), ``q = ||m_t - m_{t-1}||`` of the
   prompt descriptor of eq. 2 (eq. 4).
2. In calibration rounds (1, 1 + ``calibration_every``, ...): forward ``B`` on to
   ``p_ref``, send both interfaces, and let the server compute the probe losses
   at ``p_1`` and ``p_ref``; the label ``s = 1[L_p1 <= (1 + beta) L_pref]`` (eq. 7)
   and ``(o, r_prev)`` join the calibration buffer and ``Gamma_theta`` is
   refitted on the buffer (Alg. 1). These passes are charged in time and FLOPs.
3. ``r = Gamma_theta(o, r_prev)`` (eq. 6); the cut is
   ``p_k, k = min(K, max(1, ceil(K (1 - r + rho))))`` (eq. 8).
4. Train ``local_epochs`` over the client's data split at ``p_k``: activations
   up, the server's harmonized objective (eq. 10) with prototype alignment
   (eq. 9) and EMA prototypes, activation gradients down, client update of
   its stages and prompts. With ``server_update: per_client`` (default) the
   server step runs on the client's own copy of ``w_s`` (stages after the cut,
   projector, head), the clients' server work in parallel up to the server's
   slots; with ``sequential`` on the one shared ``w_s``, one batch at a time in
   order of simulated arrival.
5. Upload stages ``1..p_k`` (prompts stay on the device); the server averages
   every stage over the clients that trained it, weighted by samples
   (``client_fronts: local``: no upload, each client keeps its front). With
   ``per_client``, every piece of ``w_s`` becomes the sample-weighted average of
   the clients' copies that trained it (SplitFed V1's aggregation).

Reading chosen where the paper is open (DESIGN.md §6):

* The server "completes the remaining forward and backward computation on
  w_s" (§3.1): it keeps its own copies of stages ``2..L`` (``w_s``, shared by
  all clients), runs the stages after each client's cut, then pools,
  harmonizes (projector ``phi``: a per-depth linear input layer plus a shared
  two-layer MLP, with the depth embedding ``e(p)``) and predicts with ``G``.
  The client-side fronts ``w_i`` are never merged with ``w_s``, so the probe
  losses at ``p_1`` and ``p_ref`` (eq. 7) differ by how well the server's
  copies stand in for the client's deeper stages. ``server_backbone: false``
  is the other reading: the harmonized embedding of the interface itself
  feeds only the head. ``phi_s`` of eq. 3 is ``phi(., e(p_1))`` on the server
  path rather than a separate head.
* **How the server updates w_s** (``server_update``). §3.1: "The server
  completes the remaining forward and backward computation on w_s, and
  returns the interface gradients to the client to update w_i. The server
  then updates the shared submodel w_s using the contributions from
  participating clients and broadcasts the updated parameters for the next
  iteration." The same paragraph indexes rounds as iterations ("At global
  iteration t in {0, ..., T}"; Alg. 2 loops "for t = 1 to T" over communication
  rounds), so "the next iteration" is the next round. Alg. 2 matches: line 3
  broadcasts one version ``w_s^{t-1}`` per round, and after the participating
  clients' loop the server will "Project uploaded interfaces ...; Compute
  L_align and L by (9)-(10); Update w_s, phi, and G"; eq. 10 is one objective
  summed over all clients ``i``. Default ``per_client`` (SplitFed V1
  style): every client's server-side computation runs on its own copy of the
  round's ``w_s`` (stages after its cut, ``phi`` and ``G``; a fresh optimizer
  per round, as SplitFed V1), in parallel up to the server's slots, and at
  round end ``w_s`` becomes the sample-weighted average of the copies, each
  piece over the copies that trained it (a stage over the clients cut before
  it, the per-depth input layer and depth-embedding row of ``p`` over the
  clients at ``p``, MLP and ``G`` over all). This is the reading the text
  supports better: ``w_s`` is the same for every client within a round (the
  broadcast ``w_s^{t-1}``) and is updated *then*, once, from the
  contributions of all participating clients. ``sequential`` (SplitFed V2
  style, sflsim's earlier default) updates the one ``w_s`` per batch, one
  client at a time in order of simulated arrival, with a server optimizer
  that persists across rounds; no step of the text says that ``w_s`` changes
  between clients within a round. Neither reading is the literal
  per-iteration joint step of eq. 10 over all clients' batches, which would
  make clients wait for each other batch by batch. In both, the EMA
  prototypes move after every server step (in order of simulated time), the
  observation and calibration probes read the shared ``w_s`` as it is at that
  instant (with ``per_client``: the round's broadcast ``w_s``, and probes run
  in parallel up to the server's slots).
* **Client fronts** (``client_fronts``). §3.1 calls ``w_i`` "the client-side
  front submodel maintained by client i", eq. 1 writes ``F_i(w_s, w_i; B_i)``,
  and Alg. 2 returns "Trained w_s and {w_i}"; no step of Alg. 1-2 averages the
  ``w_i``, and line 3 broadcasts only ``w_s`` and the prototypes. But §3.2
  motivates the private prompts by contrast with the shared backbone: the
  prompt parameters "are not directly involved in cross-client aggregation",
  "in contrast to shared backbone parameters, whose updates are entangled with
  global optimization", and the adaptation channel is "decoupled from the
  shared backbone", which reads as if the backbone, fronts included, is
  aggregated (a private channel beside a private front would add little).
  The paper is therefore open. Default ``averaged`` (as SplitFed,
  the SFL baseline the paper builds on): each round the client downloads the
  global front, and at round end every stage is the sample-weighted average of
  the clients' copies that trained it. ``local``: each client keeps its own
  copy of stages ``1..max(candidates)`` from the common initialisation, trains
  stages ``1..p_k`` in place, and neither downloads nor uploads a front (a
  client whose cut deepens uses its own, possibly untrained, deeper stages);
  the global model's stages then stay as initialised and are unused.
* **Measurements have no side effects.** The observation pass (eqs. 3-5) and
  the calibration probes (Alg. 1 line 1, eq. 7) are measurements, not
  training, and the paper does not say how normalisation layers behave in
  them. Here they run in eval mode (:func:`~sflsim.algorithms.base.eval_mode`,
  under ``torch.no_grad``), as evaluation does: BatchNorm normalises with the
  running statistics of the model as it stands and no running statistic of
  the client's front or of ``w_s`` moves; every module's mode is restored
  afterwards. (In train mode they would normalise with the observation
  batch's statistics and fold that batch into the running statistics once
  more, on top of training.) Evaluation likewise runs in eval mode.
* ``Gamma_theta`` is a two-layer MLP ``sigmoid(W2 tanh(W1 [a, -delta, -q, r_prev]))``
  with non-negative weights (softplus of free parameters), hence increasing in
  ``a`` and ``r_prev`` and decreasing in ``delta`` and ``q``; one estimator is
  shared by all clients and refitted (binary cross-entropy, Adam) at the server
  in calibration rounds.
* Prompts enter a CNN by attention injection after the stem
  (:mod:`sflsim.models.prompts`); they are prepended after CLS for a ViT.
* Ablations (Table 4): ``adapt: false`` drops the prompts and ``q``;
  ``sufficiency: false`` drops the estimator and uses ``r = (a + 1) / 2``;
  ``harmonize: false`` drops the MLP, the depth embedding and the alignment
  loss (``Z`` is the per-depth linear layer's output).
* ``split: static | random | resource`` replaces the policy of eq. 8 (Fig. 4).

Deviations from the paper: all clients take part in every round (unless
``conditions`` drops them or the deadline cuts them off); the client
optimizer is created anew each round, the prompts' with it. With
``per_client`` a client cut off by the round deadline contributes no server
copy (as its upload does not arrive); with ``client_fronts: local`` it keeps
whatever its front trained before the deadline.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.aggregation import average_into, weighted_average
from sflsim.algorithms.base import Client, RunContext, eval_mode, register_algorithm
from sflsim.algorithms.fedavg import model_bytes
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process
from sflsim.models.prompts import PromptTokens, prompt_descriptor


def split_index(r: float, num_candidates: int, rho: float) -> int:
    """FedSGA eq. 8: ``k = min(K, max(1, ceil(K (1 - r + rho))))``, 1-based.

    Example: K = 4, rho = 0.1: r = 0.9 gives k = 1, r = 0.2 gives k = 4.
    """
    k = math.ceil(num_candidates * (1.0 - r + rho) - 1e-9)
    return min(num_candidates, max(1, k))


class MonotoneEstimator(nn.Module):
    """Gamma_theta of eq. 6: ``(B, 3) observations [a, delta, q], (B,) r_prev -> (B,) r``.

    Non-negative weights on ``[a, -delta, -q, r_prev]`` and monotone activations
    make ``r`` non-decreasing in ``a`` and ``r_prev`` and non-increasing in
    ``delta`` and ``q``.
    """

    def __init__(self, hidden: int = 8):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(hidden, 4) * 0.1)
        self.b1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(torch.randn(1, hidden) * 0.1)
        self.b2 = nn.Parameter(torch.zeros(1))

    def forward(self, obs: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        a, delta, q = obs.unbind(-1)
        z = torch.stack([a, -delta, -q, r_prev], dim=-1)  # (B, 4)
        h = torch.tanh(z @ F.softplus(self.w1).T + self.b1)  # (B, hidden)
        return torch.sigmoid(h @ F.softplus(self.w2).T + self.b2).squeeze(-1)  # (B,)


def pool(h: torch.Tensor) -> torch.Tensor:
    """Average pooling of an interface: ``(B, C, H, W)`` or ``(B, T, D)`` -> ``(B, C|D)``."""
    return h.mean(dim=(2, 3)) if h.dim() == 4 else h.mean(dim=1)


class Harmonizer(nn.Module):
    """Depth-aware projector ``Z = phi(pool(z), e(p))`` and the head ``G`` (§3.4).

    Args:
        in_dims: ``{cut layer p: interface width}``.
        dim: width of ``Z``.
        num_classes: output of ``G``.
        harmonize: False drops the MLP and the depth embedding (ablation).
    """

    def __init__(self, in_dims: dict[int, int], dim: int, num_classes: int, harmonize: bool = True):
        super().__init__()
        self.harmonize = harmonize
        self.inputs = nn.ModuleDict({str(p): nn.Linear(c, dim) for p, c in in_dims.items()})
        self.depth_embedding = nn.Embedding(max(in_dims) + 1, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, num_classes)

    def embed(self, h: torch.Tensor, p: int) -> torch.Tensor:
        """Interface ``h`` at cut ``p`` -> harmonized embedding ``Z`` ``(B, dim)``."""
        z = self.inputs[str(p)](pool(h))
        if not self.harmonize:
            return z
        return self.mlp(z + self.depth_embedding.weight[p])


class ServerPath(nn.Module):
    """The server side for interfaces from cut ``p``: ``h -> stages -> Z -> G(Z)`` logits.

    ``stages`` are the server's backbone stages after the cut (empty when the
    harmonized embedding feeds only the head).
    """

    def __init__(self, harmonizer: Harmonizer, p: int, stages: nn.Sequential):
        super().__init__()
        self.harmonizer, self.p, self.stages = harmonizer, p, stages

    def embed(self, h: torch.Tensor) -> torch.Tensor:
        return self.harmonizer.embed(self.stages(h), self.p)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.harmonizer.head(self.embed(h))


def alignment_loss(z: torch.Tensor, prototypes: torch.Tensor, y: torch.Tensor, tau_a: float
                   ) -> torch.Tensor:
    """Eq. 9: cross-entropy of ``cos(Z, C_y) / tau_a`` over classes; ``z`` ``(B, d)``."""
    cos = F.normalize(z, dim=1) @ F.normalize(prototypes, dim=1).T  # (B, classes)
    return F.cross_entropy(cos / tau_a, y)


@register_algorithm("fedsga")
class FedSGA(SplitFed):
    """FedSGA (see the module docstring)."""

    shared_server = False
    server_trains_backbone = False

    def __init__(self, ctx: RunContext):
        super().__init__(ctx)
        cfg, backbone = ctx.scenario.algorithm, ctx.backbone
        self.cfg = cfg
        self.p1 = self.candidates[0]
        self.p_ref = cfg.reference_split or self.candidates[len(self.candidates) // 2]
        gen = torch.Generator().manual_seed(ctx.seeds.get("model", 0) + 1)
        self.prompts = {c.client_id: PromptTokens(cfg.num_prompts, backbone.prompt_dim, generator=gen)
                        for c in ctx.clients} if cfg.adapt else {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seeds.get("model", 0) + 2)
            # every cut, not only the candidates: split: static uses the groups' end layers
            cuts = range(1, backbone.num_stages)
            last = backbone.stage_output_dim(backbone.num_stages)
            dims = {p: last if cfg.server_backbone else backbone.stage_output_dim(p) for p in cuts}
            self.harmonizer = Harmonizer(dims, cfg.projector_dim, backbone.num_classes, cfg.harmonize)
            self.estimator = MonotoneEstimator(cfg.estimator_hidden)
            self.prototypes = F.normalize(torch.randn(backbone.num_classes, cfg.projector_dim), dim=1)
        # w_s: the server's own copies of stages 2..L (client fronts are kept apart)
        self.server_stages = nn.Sequential(*copy.deepcopy(list(backbone.stages[1:])))
        if not cfg.server_backbone:
            self.server_stages = nn.Sequential()
        self.sequential = cfg.server_update == "sequential"
        if self.sequential:  # one w_s, one optimizer across rounds, one step at a time
            self.server_optimizer = self.round_optimizer(
                [*self.harmonizer.parameters(), *self.server_stages.parameters()], 1)
            self.server_lock = FifoResource(self.sim.env)
        #: per_client: this round's {client_id: (cut, its server path on its own copy of w_s)}
        self.server_copies: dict[int, tuple[int, ServerPath]] = {}
        #: per_client: this round's {client_id: the lock of its own server copy}
        self.server_locks: dict[int, FifoResource] = {}
        #: client_fronts: local: {client_id: its own stages 1..max(candidates)}
        self.fronts: dict[int, nn.Sequential] = {}
        if cfg.client_fronts == "local":
            self.fronts = {c.client_id: copy.deepcopy(self.global_model[:max(self.candidates)])
                           for c in ctx.clients}
        self.calibration: list[tuple[list[float], float, float]] = []  # (o, r_prev, s)
        self.r_prev = {c.client_id: 0.5 for c in ctx.clients}
        self.prev_mean_h: dict[int, torch.Tensor] = {}
        self.descriptors: dict[int, list[torch.Tensor]] = {c.client_id: [] for c in ctx.clients}
        self.last_prompt_grad: dict[int, torch.Tensor] = {}
        #: (round, client_id, a, delta, q, r, cut) of every split decision
        self.decisions: list[tuple[int, int, float, float, float, float, int]] = []

    def split_config(self) -> tuple[str, list[int] | None, float | None]:
        cfg = self.scenario.algorithm
        return cfg.split, cfg.candidates, cfg.round_budget_s

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters trained this round: stages ``1..cut`` plus prompts."""
        cut = self.cuts[client_id]
        prompts = self.prompts[client_id].tokens.numel() if self.prompts else 0
        return sum(p.numel() for p in self.global_model[:cut].parameters()) + prompts

    # ----- client-side model with prompts -------------------------------------------------
    def client_body(self, client_id: int, stages: nn.Sequential) -> nn.Sequential:
        """``stages`` (a copy of stages 1..k) with the client's prompts after stage 1."""
        children = [("0", stages[0])]
        if self.prompts:
            children.append(("prompts", self.ctx.backbone.prompt_insertion(self.prompts[client_id])))
        children += [(str(k), s) for k, s in enumerate(stages) if k > 0]
        return nn.Sequential(OrderedDict(children))

    def server_path(self, p: int) -> ServerPath:
        stages = self.server_stages[p - 1:] if len(self.server_stages) else self.server_stages
        return ServerPath(self.harmonizer, p, stages)

    # ----- one round ------------------------------------------------------------------
    def train_round(self, round_: int) -> Process:
        self.round_ = round_
        if self.policy is not None:
            self.cuts = self.policy.choose(round_)
        self.client_copies, self.server_copies, self.server_locks = {}, {}, {}
        if self.sequential:
            for group in self.server_optimizer.param_groups:
                group["lr"] = self.lr_for_round(round_)
        calibrating = ((round_ - 1) % self.cfg.calibration_every == 0 and self.cfg.sufficiency
                       and self.policy is None)
        yield from self.run_clients(lambda c: self.train_client(c, round_, calibrating))

    def train_client(self, client: Client, round_: int, calibrating: bool) -> Process:
        cid = client.client_id
        local = bool(self.fronts)
        if local:  # the client's own front: nothing to download, trained in place
            stages, have = self.fronts[cid], max(self.candidates)
        else:
            stages, have = copy.deepcopy(self.global_model[:max(self.candidates)]), self.p1
        if not self.sequential:
            self.server_locks[cid] = FifoResource(self.sim.env)
        broadcast = (0 if local else model_bytes(stages[:have])) + model_bytes(self.harmonizer) \
            + self.prototypes.numel() * 4
        yield from client.downlink.transfer("download_model", cid, broadcast)
        body = self.client_body(cid, stages)
        batches = list(self.batches(client))
        if self.policy is None:
            obs = yield from self.observe(client, body, batches[0], calibrating)
            if calibrating:
                have = max(have, self.p_ref)
            r = self.estimator_r(obs, cid) if self.cfg.sufficiency else (obs[0] + 1) / 2
            k = split_index(r, len(self.candidates), self.cfg.rho)
            self.cuts[cid] = self.candidates[k - 1]
            self.decisions.append((round_, cid, *obs, r, self.cuts[cid]))
            self.r_prev[cid] = r
        cut = self.cuts[cid]
        if cut > have:
            yield from client.downlink.transfer("download_model", cid, model_bytes(stages[have:cut]))
        body = self.client_body(cid, stages[:cut])
        optimizer = self.round_optimizer(body.parameters(), round_)
        cost = self.ctx.costs.cost(f"fedsga_client:l{cut}", body, self.ctx.backbone.input_shape)
        server, server_optimizer, lock = self.server_side(client, cut, round_)
        objective = self.server_objective(server)
        for epoch in range(self.scenario.training.local_epochs):
            for idx in (batches if epoch == 0 else self.batches(client)):
                yield from self.split_step(client, idx, body, optimizer, cost, server,
                                           server_optimizer, lock, objective=objective)
                if self.prompts:
                    self.last_prompt_grad[cid] = self.prompts[cid].tokens.grad.detach().clone()
        if self.prompts and cid in self.last_prompt_grad:
            tokens = self.prompts[cid].tokens.detach()
            self.descriptors[cid].append(
                prompt_descriptor(tokens, self.last_prompt_grad[cid], self.cfg.tau_m))
        if not self.sequential:  # the server's work for this client is done: its copy counts
            self.server_copies[cid] = (cut, server)
        if local:
            return
        yield from client.uplink.transfer("upload_model", cid, model_bytes(stages[:cut]))
        self.client_copies[cid] = stages[:cut]

    def server_side(self, client: Client, cut: int, round_: int
                    ) -> tuple[ServerPath, torch.optim.Optimizer, FifoResource]:
        """(server path, its optimizer, its lock) that serves ``client`` at ``cut`` this round.

        ``sequential``: the shared ``w_s`` with the persistent server optimizer and the one
        server lock. ``per_client``: the client's own copy of the stages after ``cut`` and
        of the harmonizer, with an optimizer of its own for the round and the client's own
        lock, so different clients' server steps run in parallel up to the server's slots
        (:meth:`~sflsim.algorithms.base.Algorithm.server_step`, as SplitFed V1).
        """
        if self.sequential:
            return self.server_path(cut), self.server_optimizer, self.server_lock
        stages = self.server_path(cut).stages
        path = ServerPath(copy.deepcopy(self.harmonizer), cut, copy.deepcopy(stages))
        optimizer = self.round_optimizer(path.parameters(), round_)
        return path, optimizer, self.server_locks[client.client_id]

    def server_objective(self, path: ServerPath):
        """Eq. 10 on interfaces through ``path``, then the EMA prototype update."""

        def objective(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = path.embed(h)
            loss = self.loss_fn(path.harmonizer.head(z), y)
            if self.cfg.harmonize and self.cfg.lambda_align > 0:
                loss = loss + self.cfg.lambda_align * alignment_loss(z, self.prototypes, y,
                                                                     self.cfg.tau_a)
            self.update_prototypes(z.detach(), y)
            return loss
        return objective

    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """Average the clients' copies of ``w_s`` (``per_client``), then the fronts
        (``averaged``; :meth:`SplitFed.end_round`)."""
        if not self.sequential:
            self.aggregate_server_copies()
            self.server_locks = {}
        super().end_round(round_)

    @torch.no_grad()
    def aggregate_server_copies(self) -> None:
        """``per_client``: every piece of ``w_s`` becomes the sample-weighted average of the
        copies that trained it this round: server stage ``j`` over the clients cut before it,
        the input layer and depth-embedding row of cut ``p`` over the clients at ``p``, the
        MLP and the head ``G`` over all. Only clients whose round completed count (dropped
        and late clients are left out); a piece nobody trained stays as it was."""
        done = {cid: entry for cid, entry in self.server_copies.items()
                if self.status.get(cid, "trained") == "trained"}
        self.server_copies = {}
        if not done:
            return
        samples = {cid: len(self.ctx.clients[cid].indices) for cid in done}
        for j, target in enumerate(self.server_stages):  # stage j + 2; copy child j - (cut - 1)
            held = [(path.stages[j - cut + 1], samples[cid]) for cid, (cut, path) in done.items()
                    if j >= cut - 1]
            if held:
                average_into([m for m, _ in held], [w for _, w in held], target=target)
        harmonizer = self.harmonizer
        for p in sorted({cut for cut, _ in done.values()}):
            at_p = [cid for cid, (cut, _) in done.items() if cut == p]
            weights = [samples[cid] for cid in at_p]
            average_into([done[cid][1].harmonizer.inputs[str(p)] for cid in at_p], weights,
                         target=harmonizer.inputs[str(p)])
            rows = [{"row": done[cid][1].harmonizer.depth_embedding.weight[p]} for cid in at_p]
            harmonizer.depth_embedding.weight[p] = weighted_average(rows, weights)["row"]
        for name in ("mlp", "head"):
            average_into([getattr(path.harmonizer, name) for _, path in done.values()],
                         list(samples.values()), target=getattr(harmonizer, name))

    @torch.no_grad()
    def update_prototypes(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``C_y <- normalize(mu C_y + (1 - mu) mean_{b: y_b = y} normalize(Z_b))``."""
        z = F.normalize(z, dim=1)
        for label in y.unique():
            mean = z[y == label].mean(0)
            c = self.cfg.mu * self.prototypes[label] + (1 - self.cfg.mu) * mean
            self.prototypes[label] = F.normalize(c, dim=0)

    # ----- observation, calibration, estimator ---------------------------------------------
    def observe(self, client: Client, body: nn.Sequential, idx: torch.Tensor, calibrating: bool
                ) -> Process:
        """Observation ``[a, delta, q]`` (eqs. 3-5); in calibration rounds also the probe."""
        cid, n = client.client_id, len(idx)
        shallow = body[: self._position(self.p1)]
        cost = self.ctx.costs.cost(f"fedsga_client_fwd:l{self.p1}", shallow,
                                   self.ctx.backbone.input_shape, backward=False)
        yield from self.sim.compute(client.actor, "observe", cid, cost.forward_flops * n,
                                    client.flops_per_s)
        x, y = self.train_batch(idx, None)  # a measurement: not augmented
        server = self.server_path(self.p1)
        with torch.no_grad(), eval_mode(shallow, server):  # a measurement: nothing moves
            h1 = shallow(x)
            pooled = pool(h1)
            phi = server.embed(h1)
            a = float(F.cosine_similarity(phi, self.prototypes[y], dim=1).mean())
            mean_h = pooled.mean(0)
            delta = float((mean_h - self.prev_mean_h[cid]).norm()) if cid in self.prev_mean_h else 0.0
            self.prev_mean_h[cid] = mean_h
            d = self.descriptors[cid]
            q = float((d[-1] - d[-2]).norm()) if len(d) >= 2 else 0.0
        obs = [a, delta, q]
        if calibrating:  # Alg. 1, in the order the probes complete in simulated time
            s = yield from self.probe(client, body, h1, x, y)
            self.calibration.append((obs, self.r_prev[cid], s))
            self.fit_estimator()
        return obs

    def probe(self, client: Client, body: nn.Sequential, h1: torch.Tensor, x: torch.Tensor,
              y: torch.Tensor) -> Process:
        """Alg. 1 lines 1-5: probe losses at ``p_1`` and ``p_ref``; returns the label of eq. 7."""
        cid, n = client.client_id, len(y)
        deeper = body[self._position(self.p1): self._position(self.p_ref)]
        cost = self.ctx.costs.cost(f"fedsga_probe:l{self.p1}-{self.p_ref}", deeper,
                                   tuple(h1.shape[1:]), backward=False)
        if not self.fronts:  # client_fronts: local: the client holds its deeper stages
            yield from client.downlink.transfer(
                "download_model", cid, model_bytes(self.global_model[self.p1:self.p_ref]))
        yield from self.sim.compute(client.actor, "calibration_probe", cid,
                                    cost.forward_flops * n, client.flops_per_s)
        with torch.no_grad(), eval_mode(deeper):
            h_ref = deeper(h1)
        payload = self.payload_bytes(tuple(h1.shape[1:]), n) + self.payload_bytes(
            tuple(h_ref.shape[1:]), n)
        yield from client.uplink.transfer("send_probe_activations", cid, payload)
        asked = self.sim.now_s
        # sequential: w_s is being trained, one step at a time; per_client: the round's w_s
        # is only read, so probes run in parallel up to the server's slots
        model_lock = self.server_lock if self.sequential else self.server_locks[cid]
        with model_lock.request() as lock:
            yield lock
            with self.ctx.server.request(cid) as slot:
                yield slot
                flops = sum(self.ctx.costs.cost(f"server:l{p}", self.server_path(p),
                                                tuple(h.shape[1:]), backward=False).forward_flops * n
                            for p, h in ((self.p1, h1), (self.p_ref, h_ref)))
                yield from self.ctx.server.run("calibration_probe", cid, flops, asked)
                path1, path_ref = self.server_path(self.p1), self.server_path(self.p_ref)
                with torch.no_grad(), eval_mode(path1, path_ref):
                    loss1 = float(self.loss_fn(path1(h1), y))
                    loss_ref = float(self.loss_fn(path_ref(h_ref), y))
        return 1.0 if loss1 <= (1 + self.cfg.beta) * loss_ref else 0.0

    def _position(self, cut: int) -> int:
        """Index in the client body just after stage ``cut`` (prompts add one child)."""
        return cut + (1 if self.prompts else 0)

    def estimator_r(self, obs: list[float], client_id: int) -> float:
        with torch.no_grad():
            return float(self.estimator(torch.tensor([obs]), torch.tensor([self.r_prev[client_id]])))

    def fit_estimator(self, steps: int = 100) -> None:
        """Alg. 1 line 8: fit Gamma_theta on every calibration pair so far (BCE, Adam)."""
        obs = torch.tensor([o for o, _, _ in self.calibration])
        r_prev = torch.tensor([r for _, r, _ in self.calibration])
        target = torch.tensor([s for _, _, s in self.calibration])
        opt = torch.optim.Adam(self.estimator.parameters(), lr=0.05)
        for _ in range(steps):
            loss = F.binary_cross_entropy(self.estimator(obs, r_prev).clamp(1e-6, 1 - 1e-6), target)
            opt.zero_grad()
            loss.backward()
            opt.step()

    # ----- evaluation ------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Each client's model (its front to its cut: the global stages, or its own with
        ``client_fronts: local``; its prompts) through the server path, in eval mode
        (:func:`~sflsim.algorithms.base.eval_mode`: every module's mode restored)."""
        result = {}
        for c in self.ctx.clients:
            cut = self.cuts[c.client_id]
            front = self.fronts.get(c.client_id, self.global_model)
            body = self.client_body(c.client_id, front[:cut])
            server = self.server_path(cut)
            with eval_mode(body, server):
                correct = sum(int((server(body(xb)).argmax(1) == yb).sum())
                              for xb, yb in self.ctx.data.batches(x, y, batch_size))
            result[c.client_id] = (correct / len(y), float("nan"))
        return result
