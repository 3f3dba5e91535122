"""The configuration of FedSGA (Yuan et al., CIKM 2026, §3): sufficiency-guided adaptive
splits (eqs. 7-8), private prompts, depth-aware harmonization (eqs. 9-10), with the
paper's defaults (§4.1) and the switches of its ablations (Table 4). Registered in order
by :mod:`sflsim.config.algorithms_builtin`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from sflsim.config.algorithms import AlgorithmConfig
from sflsim.inputs.quantities import FROZEN, TimeS


class FedSGAConfig(AlgorithmConfig):
    """FedSGA (Yuan et al., CIKM 2026, §3): sufficiency-guided adaptive splits, private
    prompts, depth-aware harmonization. Defaults are the paper's (§4.1)."""

    model_config = FROZEN
    name: Literal["fedsga"]
    capabilities: ClassVar[frozenset[str]] = frozenset({"timing_only", "cuda"})
    #: Candidate cut layers P (stage boundaries); default: every cut of the model.
    candidates: list[Annotated[int, Field(ge=1)]] | None = None
    #: p_ref, the deeper reference split of eq. 7; default: the middle candidate.
    reference_split: int | None = Field(None, ge=1)
    #: Split policy: FedSGA's sufficiency-guided one, or static/random/resource (Fig. 4).
    split: Literal["sufficiency", "static", "random", "resource"] = "sufficiency"
    #: Timing-only runs of ``split: sufficiency`` (whose cuts follow trained values): the
    #: cuts a trained run of the same scenario chose, read from its results directory
    #: (``clients.parquet`` or ``clients.csv``) or from that table itself (columns
    #: round, client_id, cut_layer); relative paths beside the scenario file, else from
    #: the working directory. The
    #: observations, probes and transfers are simulated and charged as in the trained
    #: run, each decision takes the recorded cut.
    split_schedule: str | None = None
    #: Per-round time budget of one device, for split: resource (seconds).
    round_budget_s: TimeS | None = None
    rho: float = Field(0.1, ge=0, le=1)           # eq. 8 offset toward deeper splits
    beta: float = Field(0.05, ge=0, le=1)         # eq. 7 relative tolerance
    lambda_align: float = Field(0.1, ge=0)        # eq. 10 weight of the alignment loss
    tau_a: float = Field(0.5, gt=0)               # eq. 9 temperature
    tau_m: float = Field(0.5, gt=0)               # eq. 2 temperature
    num_prompts: int = Field(4, ge=1, le=65_536)  # m
    mu: float = Field(0.9, ge=0, lt=1)            # prototype EMA
    #: Calibration rounds T_cal = {1, 1 + every, 1 + 2 every, ...}.
    calibration_every: int = Field(5, ge=1)
    #: Width of the harmonized embedding Z (projector output).
    projector_dim: int = Field(64, ge=1, le=65_536)
    #: Hidden units of the two-layer monotone estimator Gamma_theta.
    estimator_hidden: int = Field(8, ge=1, le=65_536)
    #: Ablation switches (Table 4): client-specific adaptation channel (prompts),
    #: shallow sufficiency estimator, split-compatible interface harmonization.
    adapt: bool = True
    #: Ablation switch: the shallow sufficiency estimator chooses the splits (False: the
    #: resource-driven split).
    sufficiency: bool = True
    #: Ablation switch: split-compatible interface harmonization (projector, prototypes,
    #: alignment loss; False: the head reads the server's features directly).
    harmonize: bool = True
    #: True: the server runs its own stages after the cut before harmonizing (§3.1);
    #: False: the harmonized embedding of the interface feeds only the head.
    server_backbone: bool = True
    #: How the server updates w_s (its stages after the cut, projector and head G), §3.1.
    #: per_client: each client's server work on its own copy of the round's w_s, in
    #: parallel up to the server's slots, w_s the sample-weighted average of the copies
    #: at round end (SplitFed V1 style); sequential: one w_s updated per batch in order
    #: of simulated arrival, one client at a time (SplitFed V2 style).
    server_update: Literal["per_client", "sequential"] = "per_client"
    #: The client-side fronts w_i: averaged: layer-wise sample-weighted average of the
    #: clients' copies each round (a global front is downloaded); local: each client
    #: keeps and trains its own front, never downloaded, uploaded or averaged.
    client_fronts: Literal["averaged", "local"] = "averaged"
    #: one: stage l of the model is one set of parameters, trained by whichever side holds
    #: it for a client and averaged over every copy that trained it; separate: the server
    #: keeps its own copies of stages 2..L, never merged with the client fronts.
    backbone: Literal["one", "separate"] = "one"
    #: What the probe losses of eq. 7 compare. adapted: L_pref runs the client's locally
    #: adapted stages p_1+1..p_ref (as trained for it in its last round), L_p1 the shared
    #: ones; shared: both run the shared stages, as a split at p_1 or p_ref would.
    probe: Literal["adapted", "shared"] = "adapted"
    #: shared: one projector phi and head G on the server, stepped by every client's batches
    #: in order of simulated arrival (§3.4 "a shared projection module"); per_client: a
    #: copy per client and round, averaged at round end.
    harmonizer: Literal["shared", "per_client"] = "shared"
    #: two_layer: phi = Linear-ReLU-Linear over [Pool(z) zero-padded; e(p)] (§4.1.3);
    #: per_depth: a per-depth input layer, + e(p), then Linear-ReLU-Linear.
    projector: Literal["two_layer", "per_depth"] = "two_layer"
    #: phi_s of eq. 3: separate: a lightweight linear head on the pooled p_1 interface, used
    #: only for sufficiency estimation; projector: phi(., e(p_1)) on the server path.
    phi_s: Literal["separate", "projector"] = "separate"
    #: When m_i^t (eq. 2) is computed: before_decision: from the observation batch's prompt
    #: gradient before the split of round t (Alg. 2 line 6); after_training: from the last
    #: training batch of the round before (one round late).
    descriptor: Literal["before_decision", "after_training"] = "before_decision"
    #: The prototypes of eqs. 3 and 9: previous_round: C^{t-1} as broadcast at round start
    #: (Alg. 2 line 3); live: the EMA as it stands at each step.
    prototypes: Literal["previous_round", "live"] = "previous_round"
    #: The depth embedding e of the projector (§3.4: "the semantic level at which the
    #: representation is produced"). representation: the depth of what is pooled and
    #: harmonized, the cut p with server_backbone: false, the last stage (one row for
    #: every cut) with server_backbone: true; cut: e(p) of the client's cut; none: no
    #: depth embedding (the projector's MLP stays).
    depth_embedding: Literal["representation", "cut", "none"] = "representation"
    #: Width of the depth embedding e(p); None: projector_dim. §3.4 gives e(p) no width.
    #: projector: per_depth adds e(p) to a projector_dim-wide vector, so it needs None or
    #: projector_dim.
    depth_embedding_dim: int | None = Field(None, ge=1, le=65_536)
    #: Initial value of e(p); §3.4 gives none. normal: N(0, 1), the initialisation of
    #: torch.nn.Embedding (a learnable embedding as the framework makes one; squared norm
    #: about the width); scaled: the same draw times 1/sqrt(width), N(0, 1/width) (squared
    #: norm about 1, the scale of a fan-in initialised layer's inputs); zeros: 0, e(p)
    #: learned from nothing. Every choice draws the same numbers, so the rest of the
    #: model's initial weights do not change with it.
    depth_embedding_init: Literal["normal", "scaled", "zeros"] = "normal"
    #: When the prototypes move (§3.4's EMA). per_round: one EMA step per round, C^t from
    #: C^{t-1} and the class means of every participant's Z of the round; per_step: one
    #: EMA step per server step, from that batch's class means.
    prototype_update: Literal["per_round", "per_step"] = "per_round"
    #: r before Gamma_theta has been fitted on any calibration pair: estimator: the
    #: estimator as initialised (Alg. 2 line 9 in every round); alignment: (a + 1) / 2,
    #: the sufficiency: false proxy, until the first fit.
    before_first_fit: Literal["estimator", "alignment"] = "estimator"

    @model_validator(mode="after")
    def _consistent(self) -> FedSGAConfig:
        if self.split == "resource" and self.round_budget_s is None:
            raise ValueError("split: resource needs a device's time budget per round: set "
                             "algorithm.round_budget_s (e.g. \"60 s\")")
        if self.split_schedule is not None and self.split != "sufficiency":
            raise ValueError(f"split_schedule replaces the decisions of split: sufficiency; "
                             f"split: {self.split} chooses its cuts without training, so "
                             f"remove split_schedule (or set split: sufficiency)")
        if self.client_fronts == "local" and self.backbone == "one":
            raise ValueError("client_fronts: local keeps a second copy of the fronts, which "
                             "backbone: one does not have; set backbone: separate with it, or "
                             "client_fronts: averaged")
        if self.server_update == "sequential" and self.harmonizer == "per_client":
            raise ValueError("server_update: sequential steps one w_s and one harmonizer in "
                             "order of arrival; harmonizer: per_client needs server_update: "
                             "per_client (or set harmonizer: shared)")
        if (self.projector == "per_depth" and self.depth_embedding_dim is not None
                and self.depth_embedding_dim != self.projector_dim):
            raise ValueError(f"projector: per_depth adds e(p) to a projector_dim-wide vector, "
                             f"so depth_embedding_dim must equal projector_dim "
                             f"({self.projector_dim}), got {self.depth_embedding_dim}; remove "
                             f"depth_embedding_dim or set projector: two_layer")
        if self.candidates is not None and len(set(self.candidates)) < len(self.candidates):
            raise ValueError(f"candidates must name each cut layer once, got {self.candidates}")
        if self.candidates is not None and len(self.candidates) < 2:
            raise ValueError("candidates must name at least two cut layers (p_1 and a deeper p_ref)")
        if (self.candidates is not None and self.reference_split is not None
                and self.reference_split not in self.candidates):
            raise ValueError(f"reference_split {self.reference_split} must be one of the candidates "
                             f"{self.candidates}")
        return self
