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
* **The depth embedding's width and initial value** (``depth_embedding_dim``,
  ``depth_embedding_init: normal | scaled | zeros``). §3.4 calls e(p) "a learnable
  embedding of the selected split depth" and gives it neither a width nor an initial
  value. Width: ``projector_dim`` unless set (the per-depth projector adds e to a
  ``projector_dim``-wide vector, so it needs that width). ``normal`` (default):
  N(0, 1), :class:`torch.nn.Embedding`'s own initialisation, a learnable embedding as the
  framework makes one when nothing is said; its squared norm is about the width (64), so
  under ``representation`` with the server backbone, where e is one constant row read by
  every client, it starts as a large second bias of the projector's first layer.
  ``scaled``: the same draw times 1/sqrt(width), N(0, 1/width), squared norm about 1, the
  scale of a unit-variance input; ``zeros``: e starts at 0 and is learned. The three scale
  one draw, so every other initial weight is the same. The default stays the framework's
  because the paper's text gives no other; the ``fedsga.depth_embedding`` target of the
  reproduction report measures all three with ``none`` and ``cut``, 3 seeds, IID and
  Dirichlet 0.1.
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
  the probes (eq. 7) run in eval mode (:func:`~sflsim.execution.host_threads.eval_mode`):
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

from sflsim.algorithms.fedsga.algorithm import FedSGA
from sflsim.algorithms.fedsga.estimator import MonotoneEstimator
from sflsim.algorithms.fedsga.harmonizer import Harmonizer, ServerPath, alignment_loss
from sflsim.algorithms.fedsga.policy import split_index

__all__ = [ "FedSGA", "Harmonizer", "MonotoneEstimator", "ServerPath",
           "alignment_loss", "split_index"]
