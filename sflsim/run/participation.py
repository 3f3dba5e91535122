"""Who takes part in each round, and in what conditions: the clients online at its start,
those sampled among them, and who drops out or slows down.

Conditions (``scenario.conditions``): before each round, the ``conditions``
generator draws for every client in id order whether it drops out (Bernoulli,
``client_drop_prob``) and then its compute slowdown ``exp(N(0, sigma^2))``;
both are drawn every round whatever the settings, so the same seed gives the
same draws. See :meth:`sflsim.algorithms.base.Algorithm.run_round` for the deadline.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sflsim.availability import AvailabilityTrace
from sflsim.config.scenario import Scenario
from sflsim.engine import Simulation


def wait_for_clients(sim: Simulation, availability: AvailabilityTrace | None,
                     now_s: float, deadline_at_s: float | None = None) -> float:
    """With no client online at ``now_s`` (a round's start), advance the simulated clock
    to the first instant one comes online (nothing else happens meanwhile: the wait is
    part of the round's time, the devices idle); returns the instant (s) whose online
    clients take part in the round: that one, or ``now_s`` when one is online or none
    ever will be.

    Args:
        deadline_at_s: the round's deadline instant (s of simulated time; its start plus
            ``conditions.round_deadline_s``), None for none. The deadline counts from the
            round's start, so the wait is part of it: when no client comes online before
            it (or none ever will again: past the trace's end), the clock stops at the
            deadline and ``now_s`` is returned (no client is online then, so none takes
            part and the round ends there). A client that
            comes online at the deadline instant could do no work before it and does
            not take part.
    """
    if availability is None or any(availability.online(c, now_s)
                                   for c in range(availability.num_clients)):
        return now_s
    nxt = availability.next_online_after(now_s)
    if deadline_at_s is not None and (nxt is None or nxt >= deadline_at_s):
        sim.env.run(until=deadline_at_s)
        return now_s
    if nxt is None:  # past the trace's last online instant, and no deadline: 0 s rounds
        return now_s
    sim.env.run(until=nxt)
    return sim.now_s


class Participants(NamedTuple):
    """Who takes part in a round (:func:`draw_participants`)."""

    #: ``{client_id: "offline" | "not_sampled"}`` for those who sit the round out
    absent: dict[int, str]
    #: ``{client_id: simulated time (s) it goes offline}`` for participants whose online
    #: interval ends during the round's span, whenever that ends
    offline_at: dict[int, float]
    #: the participants in the order they were sampled (the generator's draw, which
    #: orders every online client too when all of them take part): over-commitment keeps
    #: clients that finish at the same instant in this order
    #: (:meth:`sflsim.algorithms.protocol.RoundProtocol._settle`)
    order: list[int]


def draw_participants(scenario: Scenario, availability: AvailabilityTrace | None, seed: int,
                      round_: int, start_s: float) -> Participants:
    """Who takes part in ``round_`` (starting at ``start_s``), the same for every
    algorithm: clients online at the start (``conditions.availability``), of which
    ``training.clients_per_round`` (times ``training.over_commit``, rounded up) are drawn
    uniformly without replacement (all of them when fewer are online, in an order drawn
    the same way) by a generator seeded from ``SeedSequence(seed, spawn_key=(round_,))``,
    so a resumed or timing-only run draws the same clients, in the same order.
    """
    n = scenario.num_clients
    online = {c: math.inf for c in range(n)} if availability is None else {
        c: t for c in range(n) if (t := availability.offline_at(c, start_s)) is not None}
    absent = {c: "offline" for c in range(n) if c not in online}
    training = scenario.training
    k = training.drawn(n)  # FedScale's draw
    ids = sorted(online)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(round_,)))
    # all of them in a drawn order when no more are online: the order breaks ties only
    order = [int(c) for c in rng.choice(ids, size=min(k, len(ids)), replace=False)] \
        if ids else []
    if k < len(ids):
        chosen = set(order)
        absent.update({c: "not_sampled" for c in ids if c not in chosen})
    offline_at = {c: t for c, t in online.items() if c not in absent and math.isfinite(t)}
    return Participants(dict(sorted(absent.items())), offline_at, order)


def round_participants(scenario: Scenario, availability: AvailabilityTrace | None, seed: int,
                       round_: int, start_s: float) -> tuple[dict[int, str], dict[int, float]]:
    """:func:`draw_participants` without the sampling order.

    Returns:
        (``{client_id: "offline" | "not_sampled"}`` for those who sit the round out,
        ``{client_id: simulated time (s) it goes offline}`` for participants whose
        online interval ends during the round's span, whenever that ends).
    """
    drawn = draw_participants(scenario, availability, seed, round_, start_s)
    return drawn.absent, drawn.offline_at


def draw_conditions(rng: np.random.Generator, scenario: Scenario, num_clients: int
                    ) -> tuple[set[int], dict[int, float]]:
    """One round's (dropped client ids, ``{client_id: compute slowdown}``): per client in id
    order, one uniform for the dropout and one standard normal for the slowdown."""
    cond = scenario.conditions
    dropped, slowdowns = set(), {}
    if cond.client_drop_prob == 0 and cond.straggler_sigma == 0:
        return dropped, slowdowns  # nobody drops, nobody slows down: no draw is needed
    for cid in range(num_clients):
        if rng.random() < cond.client_drop_prob:
            dropped.add(cid)
        slowdowns[cid] = float(np.exp(cond.straggler_sigma * rng.standard_normal()))
    return dropped, slowdowns
