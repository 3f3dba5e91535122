"""A link whose capacity is shared by the transfers in flight (processor sharing).

Models one Wi-Fi access point or gateway uplink used by several devices
(contention). At every instant the capacity is divided max-min
fairly among the transfers in flight: equally, except that a transfer capped
below its equal share (its device's own radio rate, ``max_bps``) takes only its
cap and leaves the rest to the others. Rates change only when a transfer
arrives or finishes or the capacity trace steps, so the link is event-driven:
at each such instant it brings every transfer's remaining bits up to date and
schedules the next one. The propagation latency follows the last bit, without
holding capacity, as on :class:`sflsim.engine.Link`.

Example: two transfers of 1.25 MB (10 Mbit) start together on a 10 Mbit/s
link: each gets 5 Mbit/s and both finish at 2 s, twice the 1 s of one alone.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import simpy

from sflsim.engine.simulation import Process, Simulation
from sflsim.network.bandwidth_trace import BandwidthTrace

#: bits below which a transfer counts as finished (absorbs float rounding)
_EPS_BITS = 1e-6


@dataclass(eq=False)
class _Flow:
    remaining_bits: float
    cap: BandwidthTrace | None
    done: simpy.Event
    rate_bps: float = 0.0
    order: int = field(default=0)


def fair_shares(capacity_bps: float, caps_bps: list[float]) -> list[float]:
    """Max-min fair division of ``capacity_bps`` among flows with rate caps.

    Example: capacity 10 and caps ``[2, inf, inf]`` -> ``[2, 4, 4]``.
    """
    rates = [0.0] * len(caps_bps)
    left, n = capacity_bps, len(caps_bps)
    for i in sorted(range(len(caps_bps)), key=lambda k: caps_bps[k]):
        rates[i] = min(caps_bps[i], left / n)
        left -= rates[i]
        n -= 1
    return rates


class SharedLink:
    """One direction of a shared link: capacity divided among transfers in flight.

    Same ``transfer`` interface and trace records as :class:`sflsim.engine.Link`: a
    transfer joins the link at once and is slowed, not queued; ``queue_s`` is the wait
    for its sender's own radio (``radio``), 0 without one.

    Args:
        bandwidth_bps: capacity; replaced by ``trace`` when given.
        latency_s: added after the last bit of each transfer.
        trace: time-varying capacity (step-wise).
    """

    def __init__(self, sim: Simulation, actor: str, bandwidth_bps: float, latency_s: float,
                 trace: BandwidthTrace | None = None):
        if not bandwidth_bps > 0 or not math.isfinite(bandwidth_bps):
            raise ValueError(f"bandwidth must be finite and > 0 bit/s, got {bandwidth_bps}")
        if not latency_s >= 0 or not math.isfinite(latency_s):
            raise ValueError(f"latency must be finite and >= 0 s, got {latency_s}")
        self.sim, self.actor = sim, actor
        self.capacity = trace or BandwidthTrace.constant(bandwidth_bps)
        #: nominal capacity for estimates (the trace's time-weighted mean when traced)
        self.bandwidth_bps = self.capacity.mean_bps() if trace else float(bandwidth_bps)
        self.latency_s = float(latency_s)
        self.active: list[_Flow] = []
        self._updated_s = 0.0
        self._token = 0
        self._arrivals = 0

    @property
    def in_flight(self) -> int:
        return len(self.active)

    def transfer(self, activity: str, client_id: int, payload_bytes: int, *,
                 max_bps: BandwidthTrace | float | None = None, actor: str | None = None,
                 radio: simpy.Resource | None = None) -> Process:
        """Move ``payload_bytes``; returns when the last bit has arrived.

        Args:
            max_bps: the sender's own rate limit (a number or a trace); None: none.
            actor: the trace actor to record under (default: the link's).
            radio: the sender's radio in this direction (capacity 1): its transfers are
                sent one at a time, first come first served, as on a device's own
                :class:`~sflsim.engine.Link`; the wait is the record's ``queue_s``, and
                the radio is free again once the last bit is sent (the latency follows
                without it). None: no per-sender order (a backhaul's transfers).

        Interrupted (a round deadline, its client going offline): the flow leaves and
        frees its share and the radio; a transfer that had begun is recorded as
        ``cut_off`` with the bytes sent by then.
        """
        env = self.sim.env
        asked = start = self.sim.now_s
        cap = BandwidthTrace.constant(max_bps) if isinstance(max_bps, (int, float)) else max_bps
        flow = None
        try:
            with contextlib.ExitStack() as held:  # the radio, held while the bits go out
                if radio is not None:
                    yield held.enter_context(radio.request())
                    start = self.sim.now_s
                self._advance()
                flow = _Flow(8.0 * payload_bytes, cap, env.event(), order=self._arrivals)
                self._arrivals += 1
                if flow.remaining_bits <= 0:
                    flow.done.succeed()
                else:
                    self.active.append(flow)
                    self._reschedule()
                yield flow.done
            yield env.timeout(self.latency_s)
        except simpy.Interrupt:
            if flow is not None:  # it had begun: what was sent by now (all, in the latency)
                self._leave(flow)
                sent = 1.0 - max(flow.remaining_bits, 0.0) / max(8.0 * payload_bytes, 1.0)
                self.sim.record(actor=actor or self.actor, activity=activity,
                                client_id=client_id, start_s=start, end_s=self.sim.now_s,
                                queue_s=start - asked, payload_bytes=round(payload_bytes * sent),
                                cut_off=True)
            raise
        finally:
            if flow is not None:
                self._leave(flow)
        self.sim.record(actor=actor or self.actor, activity=activity, client_id=client_id,
                        start_s=start, end_s=self.sim.now_s, queue_s=start - asked,
                        payload_bytes=payload_bytes)

    def _leave(self, flow: _Flow) -> None:
        """``flow`` leaves before it is done (interrupted): the others share its capacity."""
        if flow in self.active:
            self._advance()
            self.active.remove(flow)
            self._reschedule()

    # ----- event-driven processor sharing -------------------------------------------
    def _advance(self) -> None:
        """Bring every flow's remaining bits up to now at the rates last set."""
        now = self.sim.now_s
        elapsed = now - self._updated_s
        if elapsed > 0:
            for f in self.active:
                f.remaining_bits -= f.rate_bps * elapsed
        self._updated_s = now

    def _reschedule(self) -> None:
        """Finish flows that are done, set fair rates, and wake at the next change."""
        now = self.sim.now_s
        finished = [f for f in self.active if f.remaining_bits <= _EPS_BITS]
        for f in finished:  # in arrival order: ties finish in the order they started
            self.active.remove(f)
            f.done.succeed()
        self._token += 1
        if not self.active:
            return
        caps = [f.cap.value_at(now) if f.cap else math.inf for f in self.active]
        rates = fair_shares(self.capacity.value_at(now), caps)
        for f, r in zip(self.active, rates):
            f.rate_bps = r
        wake = min(f.remaining_bits / f.rate_bps for f in self.active)
        changes = [self.capacity.next_change_after(now)]
        changes += [f.cap.next_change_after(now) for f in self.active if f.cap]
        wake = min(wake, min(changes) - now)
        token = self._token
        timer = self.sim.env.timeout(max(wake, 0.0))
        timer.callbacks.append(lambda _ev: self._on_timer(token))

    def _on_timer(self, token: int) -> None:
        if token != self._token:  # superseded by an arrival or an earlier wake-up
            return
        self._advance()
        # the flow(s) predicted to finish now: clear float residue
        for f in self.active:
            if f.remaining_bits <= 1e-9 * max(1.0, f.rate_bps):
                f.remaining_bits = 0.0
        self._reschedule()
