"""FedSGA's round (§3, Alg. 2): the algorithm's state, the client's round of steps 1-5 of
:mod:`sflsim.algorithms.fedsga` (download, observation and split decision of eqs. 2-8,
training at the cut against the harmonized objective of eq. 10, upload), the client-side
model with its private prompts (§3.2) and the evaluation of each client's model.

Each part of the method is a module of this package, held by :class:`FedSGA` as a field
or called as a function: the
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
from sflsim.algorithms.fedsga.client_columns import client_columns
from sflsim.algorithms.fedsga.estimator import MonotoneEstimator, SufficiencyEstimation
from sflsim.algorithms.fedsga.harmonizer import Harmonizer
from sflsim.algorithms.fedsga.observation import Observation
from sflsim.algorithms.fedsga.policy import RecordedCuts, split_index
from sflsim.algorithms.fedsga.probes import CalibrationProbes
from sflsim.algorithms.fedsga.prototypes import ClassPrototypes
from sflsim.algorithms.fedsga.round_end import end_round
from sflsim.algorithms.fedsga.server_side import ServerSide
from sflsim.algorithms.global_model import model_bytes
from sflsim.algorithms.splitfed import SplitFed
from sflsim.engine import Process
from sflsim.execution.host_threads import eval_mode
from sflsim.metrics.schedule import read_split_schedule
from sflsim.models.prompts import PromptTokens, prompt_descriptor


@register_algorithm("fedsga")
class FedSGA(SplitFed):
    """FedSGA (see :mod:`sflsim.algorithms.fedsga`).

    Its parts, each a field with its own state: :attr:`observation`
    (:class:`~sflsim.algorithms.fedsga.observation.Observation`), :attr:`calibration_probes`
    (:class:`~sflsim.algorithms.fedsga.probes.CalibrationProbes`), :attr:`sufficiency`
    (:class:`~sflsim.algorithms.fedsga.estimator.SufficiencyEstimation`), :attr:`server_side`
    (:class:`~sflsim.algorithms.fedsga.server_side.ServerSide`: harmonizer, phi_s, ``w_s``),
    :attr:`class_prototypes` (:class:`~sflsim.algorithms.fedsga.prototypes.ClassPrototypes`)
    and, in timing-only runs with ``split_schedule``, :attr:`recorded_cuts`
    (:class:`~sflsim.algorithms.fedsga.policy.RecordedCuts`); the split policies that
    replace the estimator are SplitFed's (:meth:`split_config`).
    """

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
        harmonizer, estimator, prototypes, phi_s = self.draw_pieces(ctx)
        self.class_prototypes = ClassPrototypes(prototypes, cfg.mu, cfg.prototypes,
                                                cfg.prototype_update)
        self.sufficiency = SufficiencyEstimation(estimator, cfg,
                                                 [c.client_id for c in ctx.clients])
        #: w_s: stages 2..L. backbone: one: the global model's own stages (one set of
        #: parameters per stage); separate: the server's own copies
        if not cfg.server_backbone:
            server_stages = nn.Sequential()
        elif cfg.backbone == "one":
            server_stages = nn.Sequential(*self.global_model[1:backbone.num_stages])
        else:
            server_stages = nn.Sequential(*copy.deepcopy(list(backbone.stages[1:])))
        self.server_side = ServerSide(cfg, harmonizer, phi_s, server_stages,
                                      self.class_prototypes, self.steps.loss_fn,
                                      self.round_optimizer, self.sim.env)
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
        self.calibration_probes = CalibrationProbes(self)
        self.observation = Observation(self, self.calibration_probes)
        #: (round, client_id, a, delta, q, r, cut) of every split decision
        self.decisions: list[tuple[int, int, float, float, float, float, int]] = []
        #: timing-only runs of split: sufficiency: the cuts a trained run recorded
        self.recorded_cuts: RecordedCuts | None = None
        if cfg.split_schedule is not None and ctx.timing_only:
            self.recorded_cuts = RecordedCuts(cfg.split_schedule, read_split_schedule(
                cfg.split_schedule, rounds=ctx.scenario.training.rounds,
                num_clients=len(ctx.clients), candidates=self.candidates), self.candidates)

    def draw_pieces(self, ctx: RunContext
                    ) -> tuple[Harmonizer, MonotoneEstimator, torch.Tensor, nn.Module | None]:
        """The harmonizer, the estimator, the prototypes ``(classes, projector_dim)`` and
        phi_s (None unless ``phi_s: separate``), drawn from their own seed (``model`` + 2)
        without moving the global generator."""
        cfg, backbone = ctx.scenario.algorithm, ctx.backbone
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seeds.get("model", 0) + 2)
            # every cut, not only the candidates: split: static uses the groups' end layers
            cuts = range(1, backbone.num_stages)
            last = backbone.stage_output_dim(backbone.num_stages)
            dims = {p: last if cfg.server_backbone else backbone.stage_output_dim(p) for p in cuts}
            harmonizer = Harmonizer(dims, cfg.projector_dim, backbone.num_classes,
                                    cfg.harmonize, cfg.projector,
                                    self.embedding_rows(cuts), cfg.depth_embedding_dim,
                                    cfg.depth_embedding_init).to(self.device)
            estimator = MonotoneEstimator(cfg.estimator_hidden).to(self.device)
            prototypes = F.normalize(torch.randn(backbone.num_classes, cfg.projector_dim),
                                     dim=1).to(self.device)
            # phi_s of eq. 3 (phi_s: separate): pooled p_1 interface -> prototype space
            phi_s = nn.Linear(backbone.stage_output_dim(self.p1), cfg.projector_dim
                              ).to(self.device) if cfg.phi_s == "separate" else None
        return harmonizer, estimator, prototypes, phi_s

    def split_config(self) -> tuple[str, list[int] | None, float | None]:
        cfg = self.scenario.algorithm
        return cfg.split, cfg.candidates, cfg.round_budget_s

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
            self.cost_model.cut_layers = self.policy.choose(round_)
        self.client_copies, self.round_fronts = {}, {}
        self.class_prototypes.start_round()
        self.server_side.start_round(self.lr_for_round(round_))
        calibrating = ((round_ - 1) % self.cfg.calibration_every == 0 and self.cfg.sufficiency
                       and self.policy is None)
        yield from self.protocol.run_clients(lambda c: self.train_client(c, round_, calibrating))

    def train_client(self, client: Client, round_: int, calibrating: bool) -> Process:
        """The client's round (module docstring, steps 1-5). Timing-only runs copy no
        model (views of the global stages, for costs and bytes), run no torch step and,
        under ``split: sufficiency``, take each cut from :attr:`recorded_cuts`."""
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
        server_side = self.server_side
        server_side.open(cid)
        side = server_side.phi_s if server_side.phi_s is not None else server_side.harmonizer
        # the stages held are copies of the global model's: the same bytes
        broadcast = (0 if local else self.stage_bytes(0, have)) + model_bytes(side) \
            + self.class_prototypes.prototypes.numel() * 4
        yield from client.downlink.transfer("download_model", cid, broadcast)
        body = self.client_body(cid, stages)
        batches = list(self.batching.batches(client))
        if self.policy is None:
            obs = yield from self.observation.observe(client, body, batches[0], calibrating)
            if calibrating and self.cfg.probe == "shared":
                have = max(have, self.p_ref)  # the probe downloaded the shared deeper stages
            if timing:
                self.cost_model.cut_layers[cid] = self.recorded_cuts.cut(round_, cid)
            else:
                r = self.sufficiency.r(obs, cid)
                k = split_index(r, len(self.candidates), self.cfg.rho)
                self.cost_model.cut_layers[cid] = self.candidates[k - 1]
                self.decisions.append((round_, cid, *obs, r, self.cost_model.cut_layers[cid]))
                self.sufficiency.r_prev[cid] = r
        cut = self.cost_model.cut_layers[cid]
        if cut > have:  # a deeper cut: download the stages it adds
            yield from client.downlink.transfer("download_model", cid, self.stage_bytes(have, cut))
        body = self.client_body(cid, stages[:cut])
        cost = self.ctx.costs.cost(f"fedsga_client:l{cut}", body, self.ctx.backbone.input_shape)
        if timing:
            optimizer, objective = None, None
            server, server_optimizer = server_side.path(cut), None
            lock = server_side.lock_of(cid)
        else:
            optimizer = self.round_optimizer(body.parameters(), round_)
            server, server_optimizer, lock = server_side.for_client(client, cut, round_)
            objective = server_side.objective(server, self.p1)
        after_training = bool(self.prompts) and self.cfg.descriptor == "after_training" \
            and not timing
        last_grad = self.observation.last_prompt_grad
        for epoch in range(self.scenario.training.local_epochs):
            for idx in (batches if epoch == 0 else self.batching.batches(client)):
                yield from self.split_step(client, idx, body, optimizer, cost, server,
                                           server_optimizer, lock, objective=objective)
                if after_training:
                    last_grad[cid] = self.prompts[cid].tokens.grad.detach().clone()
        if after_training and cid in last_grad:
            tokens = self.prompts[cid].tokens.detach()
            self.observation.descriptors[cid].append(
                prompt_descriptor(tokens, last_grad[cid], self.cfg.tau_m))
        if not server_side.sequential and not timing:  # the server's work for this client is done
            server_side.copies[cid] = (cut, server)
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
        (:func:`~sflsim.execution.host_threads.eval_mode`: every module's mode restored)."""
        result = {}
        for c in self.ctx.clients:
            cut = self.cost_model.cut_layers[c.client_id]
            front = self.fronts.get(c.client_id, self.global_model)
            body = self.client_body(c.client_id, front[:cut])
            server = self.server_side.path(cut)
            with eval_mode(body, server):
                correct = sum(int((server(body(xb)).argmax(1) == yb).sum())
                              for xb, yb in self.steps.test_batches(x, y, batch_size))
            result[c.client_id] = (correct / len(y), float("nan"))
        return result

    # ----- the round's end and its records ---------------------------------------------
    def end_round(self, round_: int) -> None:
        """:func:`~sflsim.algorithms.fedsga.round_end.end_round`: adapted prefixes, the
        harmonizer's and the backbone's averages, the prototypes' round step."""
        end_round(self)

    def activated_params(self, client_id: int) -> int:
        """Client-side parameters trained this round: stages ``1..cut`` plus prompts."""
        cut = self.cost_model.cut_layers[client_id]
        prompts = self.prompts[client_id].tokens.numel() if self.prompts else 0
        return self.prefix_params(cut) + prompts

    def client_columns(self, round_: int) -> dict[int, dict[str, float]]:
        """:func:`~sflsim.algorithms.fedsga.client_columns.client_columns` of the round's
        decisions and probes."""
        return client_columns(round_, [c.client_id for c in self.ctx.clients], self.decisions,
                              self.calibration_probes.records)
