"""FedSGA's round (§3, Alg. 2): the algorithm's state, the client's round of steps 1-5 of
:mod:`sflsim.algorithms.fedsga` (download, observation and split decision of eqs. 2-8,
training at the cut against the harmonized objective of eq. 10, upload), the client-side
model with its private prompts (§3.2) and the evaluation of each client's model.

Each part of the method is a module of this package, mixed into :class:`FedSGA`: the
observation (:mod:`~sflsim.algorithms.fedsga.observation`), the calibration probes
(:mod:`~sflsim.algorithms.fedsga.probes`), the estimator
(:mod:`~sflsim.algorithms.fedsga.estimator`), the split policy
(:mod:`~sflsim.algorithms.fedsga.policy`), the server side and harmonizer
(:mod:`~sflsim.algorithms.fedsga.server_side`, :mod:`~sflsim.algorithms.fedsga.harmonizer`),
the prototypes (:mod:`~sflsim.algorithms.fedsga.prototypes`), the round end
(:mod:`~sflsim.algorithms.fedsga.round_end`) and the records
(:mod:`~sflsim.algorithms.fedsga.client_columns`).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from sflsim.algorithms.base import Client, RunContext, register_algorithm
from sflsim.algorithms.fedsga.client_columns import DecisionRecords
from sflsim.algorithms.fedsga.estimator import MonotoneEstimator, SufficiencyEstimation
from sflsim.algorithms.fedsga.harmonizer import Harmonizer, ServerPath
from sflsim.algorithms.fedsga.observation import Observation
from sflsim.algorithms.fedsga.policy import SplitChoice, split_index
from sflsim.algorithms.fedsga.probes import CalibrationProbes
from sflsim.algorithms.fedsga.prototypes import ClassPrototypes
from sflsim.algorithms.fedsga.round_end import RoundAggregation
from sflsim.algorithms.fedsga.server_side import ServerSide
from sflsim.algorithms.global_model import model_bytes
from sflsim.algorithms.host_threads import eval_mode
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import FifoResource, Process
from sflsim.metrics.schedule import read_split_schedule
from sflsim.models.prompts import PromptTokens, prompt_descriptor


@register_algorithm("fedsga")
class FedSGA(Observation, CalibrationProbes, SufficiencyEstimation, SplitChoice, ServerSide,
             ClassPrototypes, RoundAggregation, DecisionRecords, SplitFed):
    """FedSGA (see :mod:`sflsim.algorithms.fedsga`)."""

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
        self.init_harmonization(ctx)
        self.init_server(ctx)
        self.init_fronts(ctx)
        self.init_calibration(ctx)
        self.init_records(ctx)

    def init_harmonization(self, ctx: RunContext) -> None:
        """The harmonizer, the estimator, the prototypes and phi_s, drawn from their own seed
        (``model`` + 2) without moving the global generator; the round's prototypes."""
        cfg, backbone = ctx.scenario.algorithm, ctx.backbone
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seeds.get("model", 0) + 2)
            # every cut, not only the candidates: split: static uses the groups' end layers
            cuts = range(1, backbone.num_stages)
            last = backbone.stage_output_dim(backbone.num_stages)
            dims = {p: last if cfg.server_backbone else backbone.stage_output_dim(p) for p in cuts}
            self.harmonizer = Harmonizer(dims, cfg.projector_dim, backbone.num_classes,
                                         cfg.harmonize, cfg.projector,
                                         self.embedding_rows(cuts), cfg.depth_embedding_dim,
                                         cfg.depth_embedding_init).to(self.device)
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

    def init_server(self, ctx: RunContext) -> None:
        """The server's stages ``w_s``, the optimizer of the server pieces shared across
        rounds, and the locks and copies of each round's server work."""
        cfg, backbone = ctx.scenario.algorithm, ctx.backbone
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

    def init_fronts(self, ctx: RunContext) -> None:
        """The stages each client holds in a round, and its own (``client_fronts: local``)."""
        cfg = ctx.scenario.algorithm
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

    def init_calibration(self, ctx: RunContext) -> None:
        """What the observations and probes read back: adapted prefixes, the calibration
        buffer, the previous estimates, shallow means and prompt descriptors."""
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

    def init_records(self, ctx: RunContext) -> None:
        """The split decisions and probes kept for the clients table, and the cuts a trained
        run recorded (``split_schedule``, timing-only runs)."""
        cfg = ctx.scenario.algorithm
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

    # ----- client-side model with prompts -------------------------------------------------
    def client_body(self, client_id: int, stages: nn.Sequential) -> nn.Sequential:
        """``stages`` (a copy of stages 1..k) with the client's prompts after stage 1."""
        children = [("0", stages[0])]
        if self.prompts:
            children.append(("prompts", self.ctx.backbone.prompt_insertion(self.prompts[client_id])))
        children += [(str(k), s) for k, s in enumerate(stages) if k > 0]
        return nn.Sequential(OrderedDict(children))

    def _position(self, cut: int) -> int:
        """Index in the client body just after stage ``cut`` (prompts add one child)."""
        return cut + (1 if self.prompts else 0)

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

    # ----- evaluation ------------------------------------------------------------------
    @torch.inference_mode()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor, batch_size: int
                 ) -> dict[int, tuple[float, float]]:
        """Each client's model (its front to its cut: the global stages, or its own with
        ``client_fronts: local``; its prompts) through the server path, in eval mode
        (:func:`~sflsim.algorithms.host_threads.eval_mode`: every module's mode restored)."""
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
