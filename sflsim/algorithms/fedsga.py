"""FedSGA: adaptive split federated learning with client-specific sufficiency estimation.

Paper: Yuan, Lin, Hu, Chen, Xu, Li, Ngai, "When Is Shallow Enough? Adaptive Split
Federated Learning with Client-Specific Sufficiency Estimation", CIKM 2026,
arXiv 2608.15639 (doi:10.1145/3799682.3840747), §3, Alg. 1-2, eqs. 2-10.

One round of client ``i`` (a SimPy process; every torch step runs when its
simulated work completes):

1. Download the client-side stages ``1..p_1`` of the global model, ``phi_s`` and
   the previous round's prototypes ``C^{t-1}``. Forward one observation batch
   ``B`` to ``p_1`` (with the client's private prompts) and form
   ``o = [a, delta, q]`` (Alg. 2 line 6): ``a`` the mean cosine between
   ``phi_s(Pool(h_p1))`` and the prototypes of its labels (eq. 3), ``delta`` the
   drift of the mean pooled shallow representation (eq. 5) and ``q`` the change
   of the prompt descriptor ``m_i^t`` (eqs. 2, 4). ``m_i^t`` is computed here,
   before the decision, from the prompt gradient of the training loss on ``B``
   (the interface goes to the server, which returns its gradient; nothing is
   updated), and every transfer and pass of it is charged.
2. In calibration rounds (1, 1 + ``calibration_every``, ...): the probe losses
   ``L_p1`` and ``L_pref`` (below), the label ``s = 1[L_p1 <= (1 + beta) L_pref]``
   (eq. 7), and ``((o, r_prev), s)`` joins the calibration buffer, on which
   ``Gamma_theta`` is refitted (Alg. 1). The probe's passes and transfers are
   charged.
3. ``r = Gamma_theta(o, r_prev)`` (eq. 6; before its first fit see
   ``before_first_fit`` below); the cut is
   ``p_k, k = min(K, max(1, ceil(K (1 - r + rho))))`` (eq. 8). A client whose cut
   is deeper than what it holds downloads the stages it adds (charged).
4. Train ``local_epochs`` over the client's data at ``p_k``: activations up, the
   server's harmonized objective (eq. 10, with the alignment of eq. 9 against
   ``C^{t-1}``), activation gradients down, client update of its stages and
   prompts. The prototypes take one EMA step at round end over the round's
   ``Z`` (``prototype_update`` below).
5. Upload stages ``1..p_k`` (prompts stay on the device). At round end every
   stage of the one backbone is the sample-weighted average of every copy that
   trained it (SplitFed V1's layer-wise aggregation with per-client cuts).

Readings chosen where the paper is open; each earlier or other reading is a switch
of ``algorithm`` (defaults first):

* **One backbone** (``backbone: one | separate``). §3.1 writes
  ``w = (w_s, {w_i})``, "w_s is the server-side submodel shared across clients,
  and w_i is the client-side front submodel", and "the server completes the
  remaining forward and backward computation on w_s". With adaptive cuts the
  server part of one client is the client part of another, so stage ``l`` is one
  set of parameters: client ``i`` at cut ``k`` trains its copy of stages ``1..k``,
  the server trains stages ``k+1..L`` for it, and at round end each stage is
  averaged over all copies that trained it, client fronts and server copies
  alike. ``separate``: the server keeps its own copies of stages ``2..L``, never
  merged with the fronts (a stage nobody at a deep cut trains stays as
  initialised on the client side).
* **Where the server pools** (``server_backbone: true | false``). ``true``: the
  server runs stages ``k+1..L`` on the interface, then pools, harmonizes and
  predicts (the "remaining forward and backward computation on w_s" of §3.1,
  and Alg. 2 line 13 "Update w_s, phi, and G"). ``false``: §3.4's literal
  "z~ = Pool(z)" of the interface itself, harmonized, feeds ``G`` (no server
  backbone).
* **What the probes compare** (``probe: adapted | shared``). §3 ties sufficiency
  to the client's adaptation: "the quality of a shallow interface depends not
  only on its current representation quality, but also on whether client-local
  adaptation has sufficiently stabilized"; §3.3: "If [p_1] already preserves
  sufficient task-relevant information for the server-side model, additional
  local forwarding is unnecessary; otherwise, the client should retain a deeper
  local prefix before offloading." Over one backbone with ``server_backbone:
  true`` the losses of splitting the *same* weights at ``p_1`` or at ``p_ref``
  differ only by the depth embedding rows the two cuts read: with
  ``depth_embedding: cut`` by ``e(p_1)`` against ``e(p_ref)``, so ``s`` is 1
  almost by construction; with ``representation`` or ``none`` (and the
  two-layer projector) not at all: ``L_p1 = L_pref`` and ``s = 1`` always. The
  target carries no information either way. ``adapted`` (default): both probes
  start from the shared stages ``1..p_1`` and end on the shared server path, and
  differ in stages ``p_1+1..p_ref``: ``L_p1`` runs the shared ones (offload at
  ``p_1``), ``L_pref`` the client's locally adapted ones, as trained for it in
  its last completed round (its own front where its cut covered them, its
  server copy after the cut). ``s = 1`` says local adaptation of the deeper
  prefix gains less than ``beta`` on the client's data: the shallow interface
  suffices (under ``depth_embedding: representation | none`` with
  ``server_backbone: true`` the two paths read the same embedding, so the
  adapted stages are their only difference). A client that has not completed a
  round has no adapted prefix and adds no calibration pair. ``shared``: the
  client forwards its downloaded (shared) stages ``p_1+1..p_ref``, as a split
  at ``p_ref`` would (with ``backbone: separate``: the client fronts against
  the server's copies).
  Probes run on the server in eval mode and under ``torch.no_grad``.
* **The harmonizer** (``harmonizer: shared | per_client``). §3.4: "phi(.) is a
  shared projection module"; Alg. 2 line 13 updates ``phi`` and ``G`` at the
  server. ``shared``: one ``phi`` and one ``G`` on the server, stepped by each
  client's batches in order of simulated arrival, with an optimizer that
  persists across rounds. ``per_client``: each client's server work uses its
  own copy of the round's harmonizer, averaged at round end (each depth
  embedding row and per-depth input layer over the clients that read it, the
  rest over all).
* **The depth embedding** (``depth_embedding: representation | cut | none``).
  §3.4: "Z = phi(z~, e(p^_i^t)), where phi(.) is a shared projection module and
  e(p^_i^t) is a learnable embedding of the selected split depth. The depth
  embedding provides explicit information about the semantic level at which the
  representation is produced. Conditioning the projector on this depth
  information allows it to compensate for systematic shifts induced by different
  split locations". Where the interface itself is pooled (``server_backbone:
  false``) the split depth is the depth at which the pooled representation is
  produced and the two sentences agree. Where the server runs stages
  ``p+1..L`` first (``server_backbone: true``), what it pools is the output of
  stage ``L`` at every cut: there is no shift of split location left in it to
  compensate, and ``e`` of the cut tells the projector only which clients sit at
  that cut (under non-IID data: that group's label prior).
  ``representation`` (default): the row of "the semantic level at which the
  representation is produced", the depth of what is pooled: the cut with
  ``server_backbone: false`` (the same as ``cut``), the last stage ``L`` (one
  row, the same for every client) with ``server_backbone: true``. ``cut``:
  ``e(p)`` of the client's cut, the literal "embedding of the selected split
  depth" at either reading. ``none``: no depth embedding; the projector's MLP
  reads the pooled representation alone (the per-depth projector's input
  layers, keyed by cut, stay).
* **The projector** (``projector: two_layer | per_depth``). §4.1.3: "the
  depth-aware projector [is] implemented as lightweight two-layer MLPs";
  §3.4: ``Z = phi(z~, e(p))``. ``two_layer``:
  ``Z = W2 ReLU(W1 [z~ ; e])``, where ``z~`` is the pooled interface
  zero-padded to the widest interface of the model and ``e`` the learnable
  ``projector_dim``-wide depth embedding (``depth_embedding``), concatenated.
  ``per_depth``: a linear layer per cut to ``projector_dim``, plus ``e``, then a
  shared Linear-ReLU-Linear (four linear layers to the logits).
* **phi_s** (``phi_s: separate | projector``). Eq. 3: "phi_s(.) [is] a
  lightweight projection head used only for sufficiency estimation" on the
  pooled shallow representation. ``separate``: a linear map from
  ``Pool(h_p1)`` to the prototype space, trained on the server with eq. 9's
  loss on every received ``p_1`` interface (detached: it moves nothing else).
  ``projector``: ``phi`` on the server path of cut ``p_1`` (with the embedding
  row that cut reads).
* **When m_i^t is computed** (``descriptor: before_decision |
  after_training``). Alg. 2 line 6 computes ``m_i^t`` before the split of
  round ``t`` (step 1 above). ``after_training``: from the last training
  batch's prompt gradient of the previous round (no extra pass; one round late).
* **Prototypes in eq. 9** (``prototypes: previous_round | live``). Eq. 9 names
  "the prototype of class y from the previous communication round" and Alg. 2
  line 3 broadcasts ``{C^{t-1}}``: ``previous_round`` freezes them for the
  round's alignment and observations while the EMA moves; ``live`` reads the
  EMA as it stands (with ``prototype_update: per_round`` the EMA stands still
  during the round: the same prototypes).
* **When the prototypes move** (``prototype_update: per_round | per_step``).
  §3.4: "After each server update, the class prototype is updated by an
  exponential moving average C^t_y <- mu C^{t-1}_y + (1 - mu)
  sum_{i in S_t} sum_{b in B_i^t} 1[y_{i,b} = y] Z^t_{i,b} /
  sum_{i in S_t} sum_{b in B_i^t} 1[y_{i,b} = y], C^t_y <- C^t_y / ||C^t_y||_2";
  eq. 9: "C^{t-1}_y denotes the prototype of class y from the previous
  communication round. Since each prototype aggregates class-level information
  across participating clients, it provides a cross-client semantic anchor";
  Alg. 2 line 14, after the clients' batches of the round: "server updates
  {C^t_y}". In Alg. 2 a round is one server update over every participant's
  batch ``B_i^t``; sflsim's round runs ``local_epochs`` of server steps per
  client. ``per_round`` (default): one EMA step per round, at round end, from
  ``C^{t-1}`` with the class means over every participant's ``Z`` the server's
  training steps computed in the round (the update's sums over ``i in S_t``); a
  class nobody sent keeps its prototype. ``per_step``: one EMA step after each
  server step, with that batch's class means (after many steps a prototype
  holds mostly the last few batches, of whichever clients the server served
  last).
* **How the server updates w_s** (``server_update: per_client | sequential``).
  §3.1: "The server then updates the shared submodel w_s using the
  contributions from participating clients and broadcasts the updated
  parameters for the next iteration", and Alg. 2 line 3 broadcasts one
  ``w_s^{t-1}`` per round. ``per_client`` (SplitFed V1 style): every client's
  server stages are its own copy of the round's ``w_s``, trained in parallel
  up to the server's slots (a fresh optimizer per round) and averaged at round
  end. ``sequential`` (SplitFed V2 style): the one ``w_s`` is stepped per batch
  in order of simulated arrival, one client at a time, with an optimizer that
  persists across rounds (the harmonizer is then shared too).
* **Client fronts** (``client_fronts: averaged | local``). No step of Alg. 1-2
  averages the ``w_i``, but §3.2 contrasts the private prompts with "shared
  backbone parameters, whose updates are entangled with global optimization".
  ``averaged``: the fronts are stages of the one backbone. ``local`` (only
  with ``backbone: separate``): each client keeps and trains its own copy of
  stages ``1..max(candidates)``, never downloaded, uploaded or averaged.
* **r before the first fit** (``before_first_fit: estimator | alignment``).
  Alg. 2 line 1 "Initialize w_s, {w_i}, {M_i}, Gamma_theta, calibration buffer,
  and class prototypes", then in every round, calibration round or not, line 9
  "Estimate r_i^t = Gamma_theta(o_i^t, r_i^{t-1}) and select p^_i^t =
  Psi(r_i^t; rho)"; no other rule is given for the rounds before the estimator
  has seen a calibration pair. ``estimator`` (default): ``r`` comes from
  ``Gamma_theta`` as initialised until its first fit. The first fit is in the
  first calibration round with a pair: round 1 with ``probe: shared``, round
  ``1 + calibration_every`` with ``probe: adapted`` (no client has an adapted
  prefix in round 1); in a calibration round the fit comes before the client's
  decision. ``alignment``: until the first fit, ``r = (a + 1) / 2``, the proxy
  of ``sufficiency: false``.
* **Measurements have no side effects.** The observation pass (eqs. 2-5) and
  the probes (eq. 7) run in eval mode (:func:`~sflsim.algorithms.host.eval_mode`):
  BatchNorm normalises with the running statistics and none moves; no
  parameter is updated by them.
* ``Gamma_theta`` is a two-layer MLP ``sigmoid(W2 tanh(W1 [a, -delta, -q, r_prev]))``
  with non-negative weights (softplus of free parameters), hence increasing in
  ``a`` and ``r_prev`` and decreasing in ``delta`` and ``q``; one estimator is
  shared by all clients and refitted (binary cross-entropy, Adam) at the server
  in calibration rounds.
* Prompts enter a CNN by attention injection after the stem
  (:mod:`sflsim.models.prompts`); they are prepended after CLS for a ViT.
* Ablations (Table 4): ``adapt: false`` drops the prompts and ``q``;
  ``sufficiency: false`` drops the estimator and uses ``r = (a + 1) / 2``;
  ``harmonize: false`` drops the depth embedding, the MLP and the alignment
  loss (``Z`` is one linear map of the pooled interface).
* ``split: static | random | resource`` replaces the policy of eq. 8 (Fig. 4).
* Timing-only runs (``training.timing_only``): with ``split: static | random |
  resource`` no observation or probe runs and no cut depends on training.
  ``split: sufficiency`` needs ``split_schedule``, a trained run's clients table
  (:mod:`sflsim.metrics.schedule`): the observation, prompt-descriptor and probe
  passes and transfers are simulated and charged as in that run (their costs
  depend on shapes only; a client is probed from the first calibration round after
  it completed a round, as its adapted prefix exists from then), and each decision
  takes the recorded cut. Nothing is estimated: the observation columns of the
  clients table are NaN.

The switches ``backbone: separate, probe: shared, harmonizer: per_client,
projector: per_depth, phi_s: projector, descriptor: after_training,
prototypes: live, depth_embedding: cut, prototype_update: per_step`` together
are sflsim's earlier reading.

Deviations from the paper: all clients take part in every round (unless
``conditions`` drops them or the deadline cuts them off); the client
optimizer is created anew each round, the prompts' with it. A client cut off
by the round deadline contributes no copy to the averages (its upload does not
arrive); steps it already made on shared server pieces stay, and the ``Z`` of
its steps count in the prototypes' update. The cost of ``phi_s``'s own step (a
linear map of a pooled vector) is not charged. The prototype EMA averages the
unit-normalised ``Z_b`` (the update of §3.4 averages ``Z`` itself and
normalises the result).
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.aggregation import average_into, weighted_average
from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.fedavg import model_bytes
from sflsim.algorithms.host import eval_mode
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process
from sflsim.errors import ConfigError
from sflsim.metrics.schedule import read_split_schedule
from sflsim.models.prompts import PromptTokens, prompt_descriptor

NAN = float("nan")


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
        return torch.sigmoid(self.logit(obs, r_prev))  # (B,)

    def logit(self, obs: torch.Tensor, r_prev: torch.Tensor) -> torch.Tensor:
        """The pre-sigmoid output ``(B,)`` (fitted with BCE on logits: no saturation)."""
        a, delta, q = obs.unbind(-1)
        z = torch.stack([a, -delta, -q, r_prev], dim=-1)  # (B, 4)
        h = torch.tanh(z @ F.softplus(self.w1).T + self.b1)  # (B, hidden)
        return (h @ F.softplus(self.w2).T + self.b2).squeeze(-1)  # (B,)


def pool(h: torch.Tensor) -> torch.Tensor:
    """Average pooling of an interface: ``(B, C, H, W)`` or ``(B, T, D)`` -> ``(B, C|D)``."""
    return h.mean(dim=(2, 3)) if h.dim() == 4 else h.mean(dim=1)


class Harmonizer(nn.Module):
    """Depth-aware projector ``Z = phi(Pool(z), e)`` and the head ``G`` (§3.4).

    Args:
        in_dims: ``{cut layer p: width of what is pooled for cut p}``.
        dim: width of ``Z`` and of the depth embedding ``e``.
        num_classes: output of ``G``.
        harmonize: False drops the depth embedding and the MLP (Table 4 ablation):
            ``Z`` is one linear map of the pooled interface.
        projector: ``two_layer``: ``Z = W2 ReLU(W1 [pad(Pool(z)); e])``, the pooled
            interface zero-padded to ``max(in_dims.values())``; ``per_depth``:
            ``Z = MLP(A_p Pool(z) + e)`` with one input layer ``A_p`` per cut.
        depths: ``{cut layer p: the row of the depth embedding that interfaces from cut
            p read}`` (``depth_embedding: representation | cut``); default: row ``p``
            (``cut``). None: no depth embedding (``depth_embedding: none``): the
            two-layer MLP reads ``pad(Pool(z))`` alone, the per-depth one ``A_p Pool(z)``.
    """

    def __init__(self, in_dims: dict[int, int], dim: int, num_classes: int, harmonize: bool = True,
                 projector: str = "two_layer", depths: dict[int, int] | None | str = "cut"):
        super().__init__()
        self.harmonize, self.projector = harmonize, projector
        self.width = max(in_dims.values())
        #: {cut p: its depth embedding row}; None: no depth embedding
        self.depths = {p: p for p in in_dims} if depths == "cut" else depths
        if projector == "per_depth":  # (creation order: the initial values of earlier runs)
            self.inputs = nn.ModuleDict({str(p): nn.Linear(c, dim) for p, c in in_dims.items()})
        self.depth_embedding = (nn.Embedding(max(max(in_dims), *self.depths.values()) + 1, dim)
                                if self.depths is not None else None)
        extra = dim if self.depths is not None else 0  # e's width in the MLP's input
        if projector == "per_depth":
            self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        elif harmonize:
            self.mlp = nn.Sequential(nn.Linear(self.width + extra, dim), nn.ReLU(),
                                     nn.Linear(dim, dim))
        else:
            self.mlp = nn.Linear(self.width, dim)
        self.head = nn.Linear(dim, num_classes)

    def row(self, p: int) -> int | None:
        """The depth embedding row interfaces from cut ``p`` read; None: no embedding."""
        return None if self.depths is None else self.depths[p]

    def embed(self, h: torch.Tensor, p: int) -> torch.Tensor:
        """Interface ``h`` at cut ``p`` -> harmonized embedding ``Z`` ``(B, dim)``."""
        pooled = pool(h)  # (B, C)
        row = self.row(p)
        if self.projector == "per_depth":
            z = self.inputs[str(p)](pooled)
            if not self.harmonize:
                return z
            return self.mlp(z if row is None else z + self.depth_embedding.weight[row])
        pooled = F.pad(pooled, (0, self.width - pooled.shape[1]))  # (B, width)
        if not self.harmonize or row is None:
            return self.mlp(pooled)
        e = self.depth_embedding.weight[row].expand(len(pooled), -1)  # (B, dim)
        return self.mlp(torch.cat([pooled, e], dim=1))

    def depth_pieces(self, p: int) -> list[nn.Module]:
        """The modules that only interfaces at cut ``p`` train (per-depth input layer)."""
        return [self.inputs[str(p)]] if self.projector == "per_depth" else []


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


class JointOptimizer:
    """Several optimizers stepped as one (a client's server copy and shared server pieces)."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()


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
        self.device = next(backbone.stages.parameters()).device
        self.p1 = self.candidates[0]
        self.p_ref = cfg.reference_split or self.candidates[len(self.candidates) // 2]
        gen = torch.Generator().manual_seed(ctx.seeds.get("model", 0) + 1)
        self.prompts = {c.client_id: PromptTokens(cfg.num_prompts, backbone.prompt_dim,
                                                  generator=gen).to(self.device)
                        for c in ctx.clients} if cfg.adapt else {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seeds.get("model", 0) + 2)
            # every cut, not only the candidates: split: static uses the groups' end layers
            cuts = range(1, backbone.num_stages)
            last = backbone.stage_output_dim(backbone.num_stages)
            dims = {p: last if cfg.server_backbone else backbone.stage_output_dim(p) for p in cuts}
            self.harmonizer = Harmonizer(dims, cfg.projector_dim, backbone.num_classes,
                                         cfg.harmonize, cfg.projector,
                                         self.embedding_rows(cuts)).to(self.device)
            self.estimator = MonotoneEstimator(cfg.estimator_hidden).to(self.device)
            self.prototypes = F.normalize(torch.randn(backbone.num_classes, cfg.projector_dim),
                                          dim=1).to(self.device)
            #: phi_s of eq. 3 (phi_s: separate): pooled p_1 interface -> prototype space
            self.phi_s = nn.Linear(backbone.stage_output_dim(self.p1), cfg.projector_dim
                                   ).to(self.device) if cfg.phi_s == "separate" else None
        #: C^{t-1}: the prototypes as broadcast at the start of the round (eqs. 3, 9)
        self.round_prototypes = self.prototypes.clone()
        #: prototype_update: per_round: this round's per-class sums of normalize(Z) and
        #: counts, (classes, dim) and (classes,); None until the round's first step
        self.prototype_sums: torch.Tensor | None = None
        self.prototype_counts: torch.Tensor | None = None
        #: w_s: stages 2..L. backbone: one: the global model's own stages (one set of
        #: parameters per stage); separate: the server's own copies
        if not cfg.server_backbone:
            self.server_stages = nn.Sequential()
        elif cfg.backbone == "one":
            self.server_stages = nn.Sequential(*self.global_model[1:backbone.num_stages])
        else:
            self.server_stages = nn.Sequential(*copy.deepcopy(list(backbone.stages[1:])))
        self.sequential = cfg.server_update == "sequential"
        self.shared_harmonizer = self.sequential or cfg.harmonizer == "shared"
        shared = [*(self.harmonizer.parameters() if self.shared_harmonizer else ()),
                  *(self.phi_s.parameters() if self.phi_s is not None else ()),
                  *(self.server_stages.parameters() if self.sequential else ())]
        #: the server pieces every client's steps update in place, one optimizer across
        #: rounds (shared harmonizer, phi_s; sequential: w_s too)
        self.server_optimizer = self.round_optimizer(shared, 1) if shared else None
        if self.sequential:
            self.server_lock = FifoResource(self.sim.env)
        #: per_client: this round's {client_id: (cut, its server path on its own copy of w_s)}
        self.server_copies: dict[int, tuple[int, ServerPath]] = {}
        #: per_client: this round's {client_id: the lock of its own server copy}
        self.server_locks: dict[int, FifoResource] = {}
        #: this round's {client_id: the stages 1..max(candidates) it held}
        self.round_fronts: dict[int, nn.Sequential] = {}
        #: client_fronts: local: {client_id: its own stages 1..max(candidates)}
        self.fronts: dict[int, nn.Sequential] = {}
        if cfg.client_fronts == "local":
            if ctx.timing_only:  # nothing trains: one view of the global stages for all
                front = self.global_model[:max(self.candidates)]
                self.fronts = {c.client_id: front for c in ctx.clients}
            else:
                self.fronts = {c.client_id: copy.deepcopy(self.global_model[:max(self.candidates)])
                               for c in ctx.clients}
        #: probe: adapted: {client_id: stages p_1+1..p_ref as trained for it in its last
        #: completed round}
        self.adapted: dict[int, nn.Sequential] = {}
        self.calibration: list[tuple[list[float], float, float]] = []  # (o, r_prev, s)
        #: whether Gamma_theta has been fitted on a calibration pair yet (before_first_fit)
        self.estimator_fitted = False
        self.r_prev = {c.client_id: 0.5 for c in ctx.clients}
        self.prev_mean_h: dict[int, torch.Tensor] = {}
        self.descriptors: dict[int, list[torch.Tensor]] = {c.client_id: [] for c in ctx.clients}
        self.last_prompt_grad: dict[int, torch.Tensor] = {}
        #: (round, client_id, a, delta, q, r, cut) of every split decision
        self.decisions: list[tuple[int, int, float, float, float, float, int]] = []
        #: (round, client_id) -> (L_p1, L_pref, s) of every calibration probe
        self.probes: dict[tuple[int, int], tuple[float, float, float]] = {}
        #: timing-only runs of split: sufficiency: {round: {client_id: cut}} recorded by a
        #: trained run (``split_schedule``), taken at each decision
        self.schedule: dict[int, dict[int, int]] = {}
        if cfg.split_schedule is not None and ctx.timing_only:
            self.schedule = read_split_schedule(
                cfg.split_schedule, rounds=ctx.scenario.training.rounds,
                num_clients=len(ctx.clients), candidates=self.candidates)

    def embedding_rows(self, cuts: Iterable[int]) -> dict[int, int] | None:
        """``{cut p: the depth embedding row its interfaces read}`` (``depth_embedding``):
        ``cut``: row ``p``; ``representation``: the depth at which the pooled, harmonized
        representation is produced, ``p`` when the interface itself is pooled
        (``server_backbone: false``), the last stage ``L`` for every cut when the server
        runs stages ``p+1..L`` first; ``none``: None (no embedding)."""
        cfg = self.scenario.algorithm
        if cfg.depth_embedding == "none":
            return None
        last = self.ctx.backbone.num_stages
        if cfg.depth_embedding == "representation" and cfg.server_backbone:
            return {p: last for p in cuts}
        return {p: p for p in cuts}

    def split_config(self) -> tuple[str, list[int] | None, float | None]:
        cfg = self.scenario.algorithm
        return cfg.split, cfg.candidates, cfg.round_budget_s

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters trained this round: stages ``1..cut`` plus prompts."""
        cut = self.cuts[client_id]
        prompts = self.prompts[client_id].tokens.numel() if self.prompts else 0
        return self.prefix_params(cut) + prompts

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """Clients-table columns of ``round_``: the observation ``[a, delta, q]``, the
        sufficiency estimate ``r`` (eq. 6) and, in calibration rounds, the probe losses
        ``L_p1`` and ``L_pref`` (nats) and the label ``s`` (eq. 7); NaN where none."""
        out = {c.client_id: {"alignment_a": NAN, "drift_delta": NAN, "prompt_change_q": NAN,
                             "sufficiency_r": NAN, "probe_loss_p1": NAN, "probe_loss_pref": NAN,
                             "sufficient_s": NAN} for c in self.ctx.clients}
        for r_, cid, a, delta, q, r, _cut in self.decisions[-2 * len(out):]:
            if r_ == round_:
                out[cid].update(alignment_a=a, drift_delta=delta, prompt_change_q=q,
                                sufficiency_r=r)
        for cid, row in out.items():
            loss1, loss_ref, s = self.probes.get((round_, cid), (NAN, NAN, NAN))
            row.update(probe_loss_p1=loss1, probe_loss_pref=loss_ref, sufficient_s=s)
        return out

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
        self.round_fronts = {}
        self.round_prototypes = self.prototypes.clone()
        self.prototype_sums = self.prototype_counts = None  # a round end_round skipped
        if self.server_optimizer is not None:
            for group in self.server_optimizer.param_groups:
                group["lr"] = self.lr_for_round(round_)
        calibrating = ((round_ - 1) % self.cfg.calibration_every == 0 and self.cfg.sufficiency
                       and self.policy is None)
        yield from self.run_clients(lambda c: self.train_client(c, round_, calibrating))

    @property
    def alignment_prototypes(self) -> torch.Tensor:
        """The prototypes eqs. 3 and 9 read: ``C^{t-1}``, or the live EMA (``prototypes: live``)."""
        return self.round_prototypes if self.cfg.prototypes == "previous_round" else self.prototypes

    def train_client(self, client: Client, round_: int, calibrating: bool) -> Process:
        """The client's round (module docstring, steps 1-5). Timing-only runs copy no
        model (views of the global stages, for costs and bytes), run no torch step and,
        under ``split: sufficiency``, take each cut from :attr:`schedule`."""
        cid, timing = client.client_id, self.ctx.timing_only
        local = bool(self.fronts)
        if local:  # the client's own front: nothing to download, trained in place
            stages, have = self.fronts[cid], max(self.candidates)
        elif timing:
            stages, have = self.global_model[:max(self.candidates)], self.p1
        else:
            stages, have = copy.deepcopy(self.global_model[:max(self.candidates)]), self.p1
        if not timing:
            self.round_fronts[cid] = stages
        if not self.sequential:
            self.server_locks[cid] = FifoResource(self.sim.env)
        side = self.phi_s if self.phi_s is not None else self.harmonizer
        # the stages held are copies of the global model's: the same bytes
        broadcast = (0 if local else self.stage_bytes(0, have)) + model_bytes(side) \
            + self.prototypes.numel() * 4
        yield from client.downlink.transfer("download_model", cid, broadcast)
        body = self.client_body(cid, stages)
        batches = list(self.batches(client))
        if self.policy is None:
            obs = yield from self.observe(client, body, batches[0], calibrating)
            if calibrating and self.cfg.probe == "shared":
                have = max(have, self.p_ref)  # the probe downloaded the shared deeper stages
            if timing:
                self.cuts[cid] = self.scheduled_cut(round_, cid)
            else:
                r = self.sufficiency_r(obs, cid)
                k = split_index(r, len(self.candidates), self.cfg.rho)
                self.cuts[cid] = self.candidates[k - 1]
                self.decisions.append((round_, cid, *obs, r, self.cuts[cid]))
                self.r_prev[cid] = r
        cut = self.cuts[cid]
        if cut > have:  # a deeper cut: download the stages it adds
            yield from client.downlink.transfer("download_model", cid, self.stage_bytes(have, cut))
        body = self.client_body(cid, stages[:cut])
        cost = self.ctx.costs.cost(f"fedsga_client:l{cut}", body, self.ctx.backbone.input_shape)
        if timing:
            optimizer, objective = None, None
            server, server_optimizer = self.server_path(cut), None
            lock = self.server_lock if self.sequential else self.server_locks[cid]
        else:
            optimizer = self.round_optimizer(body.parameters(), round_)
            server, server_optimizer, lock = self.server_side(client, cut, round_)
            objective = self.server_objective(server)
        after_training = bool(self.prompts) and self.cfg.descriptor == "after_training" \
            and not timing
        for epoch in range(self.scenario.training.local_epochs):
            for idx in (batches if epoch == 0 else self.batches(client)):
                yield from self.split_step(client, idx, body, optimizer, cost, server,
                                           server_optimizer, lock, objective=objective)
                if after_training:
                    self.last_prompt_grad[cid] = self.prompts[cid].tokens.grad.detach().clone()
        if after_training and cid in self.last_prompt_grad:
            tokens = self.prompts[cid].tokens.detach()
            self.descriptors[cid].append(
                prompt_descriptor(tokens, self.last_prompt_grad[cid], self.cfg.tau_m))
        if not self.sequential and not timing:  # the server's work for this client is done
            self.server_copies[cid] = (cut, server)
        if not local:
            yield from client.uplink.transfer("upload_model", cid, self.stage_bytes(0, cut))
            if not timing:
                self.client_copies[cid] = stages[:cut]
        if timing and self.cfg.probe == "adapted":
            # what end_round keeps for a client whose round completed (timing-only runs
            # have no end_round): it has an adapted prefix to probe from now on
            self.adapted[cid] = stages[self.p1:self.p_ref]

    def scheduled_cut(self, round_: int, client_id: int) -> int:
        """The cut ``client_id`` takes at its decision in ``round_`` in a timing-only run:
        the one :attr:`schedule` recorded.

        Raises:
            ConfigError: the recorded cut is not a candidate (the table shows a client
                that did not reach its decision in the recorded run as reaching it here:
                it records another scenario's run).
        """
        cut = self.schedule[round_][client_id]
        if cut not in self.candidates:
            raise ConfigError(
                f"algorithm.split_schedule: {self.cfg.split_schedule!r}: client {client_id} "
                f"decides its cut in round {round_}, and the table records cut_layer {cut}, "
                f"which is not a candidate (the recorded run did not reach this decision: it "
                f"is a run of another scenario); valid: a trained run of this scenario, whose "
                f"cuts are among {', '.join(map(str, self.candidates))}")
        return cut

    def server_side(self, client: Client, cut: int, round_: int
                    ) -> tuple[ServerPath, torch.optim.Optimizer | JointOptimizer, FifoResource]:
        """(server path, its optimizer, its lock) that serves ``client`` at ``cut`` this round.

        ``sequential``: the shared ``w_s`` and harmonizer with the persistent server
        optimizer and the one server lock. ``per_client``: the client's own copy of the
        stages after ``cut`` (and, with ``harmonizer: per_client``, of the harmonizer),
        with an optimizer of its own for the round, joined to the persistent optimizer of
        the shared pieces, and the client's own lock, so different clients' server steps
        run in parallel up to the server's slots
        (:meth:`~sflsim.algorithms.base.Algorithm.server_step`, as SplitFed V1).
        """
        if self.sequential:
            return self.server_path(cut), self.server_optimizer, self.server_lock
        stages = copy.deepcopy(self.server_path(cut).stages)
        harmonizer = self.harmonizer if self.shared_harmonizer else copy.deepcopy(self.harmonizer)
        path = ServerPath(harmonizer, cut, stages)
        own = [*(() if self.shared_harmonizer else harmonizer.parameters()), *stages.parameters()]
        optimizers = [self.round_optimizer(own, round_)] if own else []
        if self.server_optimizer is not None:
            optimizers.append(self.server_optimizer)
        return path, JointOptimizer(*optimizers), self.server_locks[client.client_id]

    def server_objective(self, path: ServerPath):
        """Eq. 10 on interfaces through ``path`` (plus phi_s's own loss on ``p_1``
        interfaces, detached), then the EMA prototype update (``per_step``) or the
        step's ``Z`` added to the round's class sums (``per_round``)."""

        def objective(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            z = path.embed(h)
            loss = self.loss_fn(path.harmonizer.head(z), y)
            if self.cfg.harmonize and self.cfg.lambda_align > 0:
                loss = loss + self.cfg.lambda_align * alignment_loss(z, self.alignment_prototypes,
                                                                     y, self.cfg.tau_a)
            if self.phi_s is not None and path.p == self.p1:
                loss = loss + self.phi_s_loss(h.detach(), y)
            if self.cfg.prototype_update == "per_step":
                self.update_prototypes(z.detach(), y)
            else:
                self.accumulate_prototypes(z.detach(), y)
            return loss
        return objective

    def phi_s_loss(self, h1: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Eq. 9's loss of ``phi_s(Pool(h_p1))`` against the prototypes (trains phi_s only)."""
        return alignment_loss(self.phi_s(pool(h1)), self.alignment_prototypes, y, self.cfg.tau_a)

    @torch.no_grad()
    def end_round(self, round_: int) -> None:
        """Keep each client's adapted prefix (``probe: adapted``), then average: the
        harmonizer copies (``harmonizer: per_client``) and every backbone stage over the
        copies that trained it (:meth:`aggregate_backbone`); then the round's prototype
        update (``prototype_update: per_round``)."""
        done = {cid: self.cuts[cid] for cid in self.round_fronts
                if self.status.get(cid, "trained") == "trained"
                and (cid in self.client_copies or self.fronts)}
        if self.cfg.probe == "adapted":
            for cid, cut in done.items():
                self.adapted[cid] = self.adapted_prefix(cid, cut)
        if not self.shared_harmonizer:
            self.aggregate_harmonizers(done)
        self.aggregate_backbone(done)
        self.end_prototypes()
        self.client_copies, self.server_copies, self.server_locks = {}, {}, {}
        self.round_fronts = {}

    def adapted_prefix(self, cid: int, cut: int) -> nn.Sequential:
        """Stages ``p_1+1..p_ref`` as trained for ``cid`` this round: its front up to its cut,
        then its server copy (``per_client``) or the shared stage; a copy."""
        out = []
        for j in range(self.p1, self.p_ref):  # global_model index j: stage j + 1
            if j < cut or not len(self.server_stages):
                out.append(self.round_fronts[cid][j])
            elif cid in self.server_copies:
                out.append(self.server_copies[cid][1].stages[j - cut])
            else:
                out.append(self.server_stages[j - 1])
        return copy.deepcopy(nn.Sequential(*out))

    @torch.no_grad()
    def aggregate_harmonizers(self, done: dict[int, int]) -> None:
        """``harmonizer: per_client``: the harmonizer becomes the sample-weighted average of
        the clients' copies: the input layer of cut ``p`` over the clients at ``p``, each
        depth embedding row over the clients whose cut reads it (``depth_embedding: cut``:
        the clients at ``p``; ``representation`` with ``server_backbone: true``: all), the
        rest over all; a piece nobody trained stays as it was."""
        copies = {cid: self.server_copies[cid][1].harmonizer for cid in done if cid in self.server_copies}
        if not copies:
            return
        samples = {cid: self.aggregation_weight(cid) for cid in copies}
        h = self.harmonizer
        for p in sorted({done[cid] for cid in copies}):
            at_p = [cid for cid in copies if done[cid] == p]
            weights = [samples[cid] for cid in at_p]
            for k, piece in enumerate(h.depth_pieces(p)):
                average_into([copies[cid].depth_pieces(p)[k] for cid in at_p], weights, target=piece)
        if h.depth_embedding is not None:
            for row in sorted({h.row(done[cid]) for cid in copies}):
                at_row = [cid for cid in copies if h.row(done[cid]) == row]
                rows = [{"row": copies[cid].depth_embedding.weight[row]} for cid in at_row]
                h.depth_embedding.weight[row] = weighted_average(
                    rows, [samples[cid] for cid in at_row])["row"]
        for name in ("mlp", "head"):
            average_into([getattr(c, name) for c in copies.values()], list(samples.values()),
                         target=getattr(h, name))

    @torch.no_grad()
    def aggregate_backbone(self, done: dict[int, int]) -> None:
        """Every stage becomes the sample-weighted average of the copies that trained it this
        round: the fronts of the clients cut at or after it, and the server copies
        (``per_client``) of the clients cut before it, or (``sequential``) the one ``w_s``
        trained in place, weighted by the samples of the clients it served there. With
        ``backbone: one`` a stage's client and server copies go into one average; with
        ``separate`` the fronts go into the global model and the server copies into the
        server's own stages. Only clients whose round completed count; a stage nobody
        trained stays as it was."""
        pooled: dict[int, tuple[nn.Module, list, list]] = {}

        def add(target: nn.Module, module: nn.Module, weight: float) -> None:
            entry = pooled.setdefault(id(target), (target, [], []))
            entry[1].append(module.state_dict())
            entry[2].append(weight)

        samples = {cid: self.aggregation_weight(cid) for cid in done}
        for cid, cut in done.items():
            if not self.fronts:
                for j in range(cut):
                    add(self.global_model[j], self.client_copies[cid][j], samples[cid])
            if cid in self.server_copies:
                for i, module in enumerate(self.server_copies[cid][1].stages):
                    add(self.server_stages[cut - 1 + i], module, samples[cid])
        if self.sequential:
            for i, stage in enumerate(self.server_stages):  # stage i + 2
                served = sum(samples[cid] for cid, cut in done.items() if cut <= i + 1)
                if served:
                    add(stage, stage, served)
        for target, states, weights in pooled.values():
            mean = weighted_average(states, weights)
            for name, tensor in target.state_dict().items():
                tensor.copy_(mean[name])

    @torch.no_grad()
    def update_prototypes(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_step``, one server step's batch:
        ``C_y <- normalize(mu C_y + (1 - mu) mean_{b: y_b = y} normalize(Z_b))``."""
        z = F.normalize(z, dim=1)
        for label in y.unique():
            mean = z[y == label].mean(0)
            c = self.cfg.mu * self.prototypes[label] + (1 - self.cfg.mu) * mean
            self.prototypes[label] = F.normalize(c, dim=0)

    @torch.no_grad()
    def accumulate_prototypes(self, z: torch.Tensor, y: torch.Tensor) -> None:
        """``prototype_update: per_round``: add one server step's ``normalize(Z_b)`` to the
        round's per-class sums and counts (:meth:`end_prototypes` applies them)."""
        if self.prototype_sums is None:
            self.prototype_sums = torch.zeros_like(self.prototypes)
            self.prototype_counts = torch.zeros(len(self.prototypes), device=self.prototypes.device)
        z = F.normalize(z, dim=1)
        for label in y.unique():  # (not index_add_: atomic, hence unordered, on a GPU)
            mask = y == label
            self.prototype_sums[label] += z[mask].sum(0)
            self.prototype_counts[label] += mask.sum()

    @torch.no_grad()
    def end_prototypes(self) -> None:
        """``prototype_update: per_round``: §3.4's one EMA step of the round over every
        participant's ``Z`` the server computed, ``C^t_y <- normalize(mu C^{t-1}_y + (1 - mu)
        mean_{i in S_t, b: y_b = y} normalize(Z_b))``; a class nobody sent stays as it was."""
        if self.prototype_sums is None:
            return
        seen = self.prototype_counts > 0
        mean = self.prototype_sums[seen] / self.prototype_counts[seen, None]
        c = self.cfg.mu * self.prototypes[seen] + (1 - self.cfg.mu) * mean
        self.prototypes[seen] = F.normalize(c, dim=1)
        self.prototype_sums = self.prototype_counts = None

    # ----- observation, calibration, estimator ---------------------------------------------
    def observe(self, client: Client, body: nn.Sequential, idx: torch.Tensor, calibrating: bool
                ) -> Process:
        """Observation ``[a, delta, q]`` (eqs. 2-5); in calibration rounds also the probe.
        Timing-only runs simulate the same work and return None."""
        cid, n = client.client_id, len(idx)
        shallow = body[: self._position(self.p1)]
        cost = self.ctx.costs.cost(f"fedsga_client_fwd:l{self.p1}", shallow,
                                   self.ctx.backbone.input_shape, backward=False)
        yield from self.sim.compute(client.actor, "observe", cid, cost.forward_flops * n,
                                    client.flops_per_s)
        if self.ctx.timing_only:  # the same passes and transfers, shapes only; no observation
            h1 = self.meta_tensor((n, *cost.output_shape))
            if self.prompts and self.cfg.descriptor == "before_decision":
                yield from self.describe_prompts(client, shallow, None, None, shape=h1.shape)
            if calibrating and (self.cfg.probe == "shared" or cid in self.adapted):
                yield from self.probe(client, body, h1, None, None)
            return None
        x, y = self.train_batch(idx, None)  # a measurement: not augmented
        prototypes = self.alignment_prototypes
        with torch.no_grad(), eval_mode(shallow, self.server_path(self.p1)):
            h1 = shallow(x)
            pooled = pool(h1)
            if self.phi_s is not None:
                phi = self.phi_s(pooled)
            else:
                phi = self.server_path(self.p1).embed(h1)
            a = float(F.cosine_similarity(phi, prototypes[y], dim=1).mean())
            mean_h = pooled.mean(0)
            delta = float((mean_h - self.prev_mean_h[cid]).norm()) if cid in self.prev_mean_h else 0.0
            self.prev_mean_h[cid] = mean_h
        if self.prompts and self.cfg.descriptor == "before_decision":
            yield from self.describe_prompts(client, shallow, x, y)
        d = self.descriptors[cid]
        q = float((d[-1] - d[-2]).norm()) if len(d) >= 2 else 0.0
        obs = [a, delta, q]
        if calibrating and (self.cfg.probe == "shared" or cid in self.adapted):
            s = yield from self.probe(client, body, h1, x, y)
            self.calibration.append((obs, self.r_prev[cid], s))
            self.fit_estimator()
        return obs

    def describe_prompts(self, client: Client, shallow: nn.Sequential, x: torch.Tensor | None,
                         y: torch.Tensor | None, *, shape: torch.Size | None = None) -> Process:
        """Alg. 2 line 6: ``m_i^t`` (eq. 2) from the prompt gradient of the training loss on
        the observation batch: the ``p_1`` interface goes up, the server runs the shared
        path forward and backward (no update), the interface gradient comes down and the
        client backpropagates to its prompts; each part charged. Nothing moves.

        Args:
            x, y: the observation batch ``(B, C, H, W)``, ``(B,)``; None in timing-only
                runs, which give ``shape``, the interface's ``(B, ...)``, and simulate the
                same work with no torch step.
        """
        cid, timing = client.client_id, self.ctx.timing_only
        if timing:
            n, interface = shape[0], tuple(shape[1:])
        else:
            tokens = self.prompts[cid].tokens
            # torch work in blocks between the yields: another process may train a module
            # shared with this one while this one waits, so no mode may stay switched
            with torch.enable_grad(), eval_mode(shallow):
                h1 = shallow(x)  # (B, ...) with its graph back to the prompts
            n, interface = len(y), tuple(h1.shape[1:])
        payload = self.payload_bytes(interface, n)
        yield from client.uplink.transfer("send_activations", cid, payload)
        asked = self.sim.now_s
        server = self.server_path(self.p1)
        flops = self.ctx.costs.cost(f"server:l{self.p1}", server, interface,
                                    input_requires_grad=True).train_flops(n)
        lock = self.server_lock if self.sequential else self.server_locks[cid]
        with lock.request() as model_lock:
            yield model_lock
            with self.ctx.server.request(cid) as slot:
                yield slot
                yield from self.ctx.server.run("describe_prompts", cid, flops, asked)
                if not timing:
                    with torch.enable_grad(), eval_mode(server):
                        h = h1.detach().requires_grad_()
                        (grad_h,) = torch.autograd.grad(self.loss_fn(server(h), y), h)
        yield from client.downlink.transfer("send_gradients", cid, payload)
        cost = self.ctx.costs.cost(f"fedsga_client_fwd:l{self.p1}", shallow,
                                   self.ctx.backbone.input_shape, backward=False)
        yield from self.sim.compute(client.actor, "describe_prompts", cid,
                                    cost.forward_flops * 2 * n, client.flops_per_s)
        if timing:
            return
        (grad,) = torch.autograd.grad(h1, tokens, grad_outputs=grad_h)
        self.descriptors[cid].append(prompt_descriptor(tokens.detach(), grad, self.cfg.tau_m))

    def probe(self, client: Client, body: nn.Sequential, h1: torch.Tensor, x: torch.Tensor,
              y: torch.Tensor) -> Process:
        """Alg. 1 lines 1-5: probe losses at ``p_1`` and ``p_ref``; returns the label of eq. 7
        (and keeps both losses in :attr:`probes`). Timing-only runs (``h1`` a shape, ``x``
        and ``y`` None) simulate the same work and return None."""
        cid, n, timing = client.client_id, len(h1), self.ctx.timing_only
        if self.cfg.probe == "adapted" and not timing:
            deeper = self.adapted[cid]
        else:  # (timing only: stages p_1+1..p_ref as the adapted prefix has them, for costs)
            deeper = body[self._position(self.p1): self._position(self.p_ref)]
        cost = self.ctx.costs.cost(f"fedsga_probe:l{self.p1}-{self.p_ref}", deeper,
                                   tuple(h1.shape[1:]), backward=False)
        if not self.fronts:  # client_fronts: local: the client holds its deeper stages
            yield from client.downlink.transfer(
                "download_model", cid, self.stage_bytes(self.p1, self.p_ref))
        yield from self.sim.compute(client.actor, "calibration_probe", cid,
                                    cost.forward_flops * n, client.flops_per_s)
        if timing:
            h_ref = self.meta_tensor((n, *cost.output_shape))
        else:
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
                if timing:
                    return None
                path1, path_ref = self.server_path(self.p1), self.server_path(self.p_ref)
                with torch.no_grad(), eval_mode(path1, path_ref):
                    loss1 = float(self.loss_fn(path1(h1), y))
                    loss_ref = float(self.loss_fn(path_ref(h_ref), y))
        s = 1.0 if loss1 <= (1 + self.cfg.beta) * loss_ref else 0.0
        self.probes[(self.round_, cid)] = (loss1, loss_ref, s)
        return s

    def _position(self, cut: int) -> int:
        """Index in the client body just after stage ``cut`` (prompts add one child)."""
        return cut + (1 if self.prompts else 0)

    def sufficiency_r(self, obs: list[float], client_id: int) -> float:
        """``r`` of the split decision: ``Gamma_theta(o, r_prev)`` (eq. 6), or the alignment
        proxy ``(a + 1) / 2`` with ``sufficiency: false`` and, with ``before_first_fit:
        alignment``, while the estimator has not been fitted on any calibration pair."""
        if not self.cfg.sufficiency or (self.cfg.before_first_fit == "alignment"
                                        and not self.estimator_fitted):
            return (obs[0] + 1) / 2
        return self.estimator_r(obs, client_id)

    def estimator_r(self, obs: list[float], client_id: int) -> float:
        with torch.no_grad():
            return float(self.estimator(torch.tensor([obs], device=self.device),
                                        torch.tensor([self.r_prev[client_id]], device=self.device)))

    def fit_estimator(self, steps: int = 100) -> None:
        """Alg. 1 line 8: fit Gamma_theta on every calibration pair so far (binary
        cross-entropy on the logits, Adam; clamping probabilities instead would stop the
        gradient once an output saturates, and the estimator would never recover)."""
        def column(values: Iterable) -> torch.Tensor:
            return torch.tensor(list(values), device=self.device)

        obs = column(o for o, _, _ in self.calibration)
        r_prev = column(r for _, r, _ in self.calibration)
        target = column(s for _, _, s in self.calibration)
        opt = torch.optim.Adam(self.estimator.parameters(), lr=0.05)
        for _ in range(steps):
            loss = F.binary_cross_entropy_with_logits(self.estimator.logit(obs, r_prev), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.estimator_fitted = True

    # ----- evaluation ------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Each client's model (its front to its cut: the global stages, or its own with
        ``client_fronts: local``; its prompts) through the server path, in eval mode
        (:func:`~sflsim.algorithms.host.eval_mode`: every module's mode restored)."""
        result = {}
        for c in self.ctx.clients:
            cut = self.cuts[c.client_id]
            front = self.fronts.get(c.client_id, self.global_model)
            body = self.client_body(c.client_id, front[:cut])
            server = self.server_path(cut)
            with eval_mode(body, server):
                correct = sum(int((server(body(xb)).argmax(1) == yb).sum())
                              for xb, yb in self.test_batches(x, y, batch_size))
            result[c.client_id] = (correct / len(y), float("nan"))
        return result
