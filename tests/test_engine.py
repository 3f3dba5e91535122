"""The SimPy engine against hand arithmetic."""

import copy

import pytest
import simpy

from sflsim.engine import Link, Server, Simulation, transfer_time_s


def test_transfer_time_hand_arithmetic():
    # 524,288 bytes over 8 Mbit/s with 10 ms latency: 0.524288 s + 0.01 s
    assert transfer_time_s(524_288, 8_000_000, 0.010) == pytest.approx(0.534288, abs=1e-12)


def test_link_lone_transfer_matches_formula_and_is_recorded():
    sim = Simulation()
    link = Link(sim, "client0:uplink", 8_000_000, 0.010)
    sim.run_until(link.transfer("send_activations", 0, 524_288))
    assert sim.now_s == pytest.approx(0.534288)
    (event,) = sim.trace
    assert (event.actor, event.payload_bytes) == ("client0:uplink", 524_288)
    assert event.end_s - event.start_s == pytest.approx(0.534288)


def test_link_pipelines_back_to_back_transfers():
    # two transfers: serialisation is serial, latency overlaps
    sim = Simulation()
    link = Link(sim, "l", 8e6, 0.5)
    procs = [sim.env.process(link.transfer("x", 0, 1_000_000)) for _ in range(2)]
    sim.env.run(sim.env.all_of(procs))
    assert sim.now_s == pytest.approx(1.0 + 1.0 + 0.5)
    assert sim.trace[1].queue_s == pytest.approx(1.0)


def test_server_fifo_queue_records_wait():
    sim = Simulation()
    server = Server(sim, flops_per_s=1e9, slots=1)

    def job(cid):
        asked = sim.now_s
        with server.request() as slot:
            yield slot
            yield from server.run("server_train", cid, 2e9, asked)

    procs = [sim.env.process(job(c)) for c in (0, 1, 2)]
    sim.env.run(sim.env.all_of(procs))
    assert [e.client_id for e in sim.trace] == [0, 1, 2]
    assert [e.queue_s for e in sim.trace] == pytest.approx([0.0, 2.0, 4.0])
    assert sim.now_s == pytest.approx(6.0)


def test_server_slots_run_jobs_concurrently():
    sim = Simulation()
    server = Server(sim, flops_per_s=1e9, slots=2)

    def job(cid):
        with server.request() as slot:
            yield slot
            yield from server.run("server_train", cid, 1e9, sim.now_s)

    sim.env.run(sim.env.all_of([sim.env.process(job(c)) for c in range(4)]))
    assert sim.now_s == pytest.approx(2.0)


def test_link_rejects_non_positive_bandwidth():
    with pytest.raises(ValueError, match="bandwidth"):
        Link(Simulation(), "l", 0.0, 0.0)


def test_fifo_resource_serves_in_request_order_and_frees_abandoned_places():
    import simpy

    from sflsim.engine import FifoResource

    env = simpy.Environment()
    res = FifoResource(env, capacity=2)
    log: list[tuple[str, float]] = []

    def job(name: str, start: float, hold: float):
        yield env.timeout(start)
        try:
            with res.request() as req:
                yield req
                log.append((name, env.now))
                yield env.timeout(hold)
        except simpy.Interrupt:
            log.append((f"{name} gave up", env.now))

    procs = {n: env.process(job(n, s, h)) for n, s, h in
             [("a", 0, 5), ("b", 0, 3), ("c", 1, 1), ("d", 2, 1), ("e", 2, 1)]}

    def impatient():
        yield env.timeout(2.5)
        procs["d"].interrupt()

    env.process(impatient())
    env.run()
    assert log == [("a", 0), ("b", 0), ("d gave up", 2.5), ("c", 3), ("e", 4)]
    assert res.users == 0 and not res.queue


def test_fifo_queue_computes_the_times_a_lock_and_a_free_slot_give():
    """Server.run_queued books each job behind the ones before it; the trace equals the
    queue-for-a-lock-then-a-slot path when nothing else uses the server."""
    import simpy

    from sflsim.engine import FifoQueue, FifoResource

    def run(queued: bool) -> list[tuple]:
        sim = Simulation()
        server = Server(sim, flops_per_s=10.0, slots=2)
        lock, queue = FifoResource(sim.env), FifoQueue(sim.env)

        def job(cid: int, at: float, flops: float):
            yield sim.env.timeout(at)
            if queued:
                yield from server.run_queued("server_train", cid, flops, queue)
                return
            arrived = sim.now_s
            with lock.request() as req:
                yield req
                with server.request(cid) as slot:
                    yield slot
                    yield from server.run("server_train", cid, flops, arrived)

        for cid, at, flops in [(0, 0.0, 10.0), (1, 0.5, 10.0), (2, 0.5, 5.0), (3, 5.0, 10.0)]:
            sim.env.process(job(cid, at, flops))
        sim.env.run()
        return [(e.client_id, e.start_s, e.end_s, e.queue_s) for e in sim.trace]

    assert run(True) == run(False) == [(0, 0.0, 1.0, 0.0), (1, 1.0, 2.0, 0.5),
                                       (2, 2.0, 2.5, 1.5), (3, 5.0, 6.0, 0.0)]

    # a round deadline interrupts every job, running or waiting: the running one is
    # recorded up to the cut (10 s from 0, cut at 1), the waiting one not at all, and the
    # model is free from the cut: a job arriving at 2 starts at once
    sim = Simulation()
    server, queue = Server(sim, flops_per_s=1.0), FifoQueue(sim.env)

    def job(cid: int, at: float, flops: float):
        yield sim.env.timeout(at)
        try:
            yield from server.run_queued("server_train", cid, flops, queue)
        except simpy.Interrupt:
            pass

    jobs = [sim.env.process(job(0, 0.0, 10.0)), sim.env.process(job(1, 0.5, 4.0))]

    def cut():
        yield sim.env.timeout(1.0)
        for p in jobs:
            p.interrupt()

    sim.env.process(cut())
    sim.env.process(job(2, 2.0, 3.0))
    sim.env.run()
    assert [(e.client_id, e.start_s, e.end_s, e.queue_s, e.flops, e.cut_off) for e in sim.trace] == [
        (0, 0.0, 1.0, 0.0, 1.0, True), (2, 2.0, 5.0, 0.0, 3.0, False)]


def _interrupt_at(sim: Simulation, work, at_s: float) -> None:
    """Run ``work`` as a process, interrupt it at ``at_s`` and run to the end."""
    import simpy

    def guarded():
        try:
            yield from work
        except simpy.Interrupt:
            pass

    proc = sim.env.process(guarded())

    def cut():
        yield sim.env.timeout(at_s)
        if proc.is_alive:
            proc.interrupt()

    sim.env.process(cut())
    sim.env.run()


def test_cut_off_compute_is_recorded_pro_rata():
    sim = Simulation()
    _interrupt_at(sim, sim.compute("client0", "client_train", 0, 100.0, 10.0), 4.0)
    (e,) = sim.trace
    assert (e.start_s, e.end_s, e.flops, e.cut_off) == (0.0, 4.0, pytest.approx(40.0), True)
    sim = Simulation()  # cut at the very start: nothing was done, nothing recorded
    _interrupt_at(sim, sim.compute("client0", "client_train", 0, 100.0, 10.0), 0.0)
    assert sim.trace == []


@pytest.mark.parametrize(("cut_s", "sent_bytes"), [(0.25, 250), (1.2, 1000)])
def test_cut_off_transfer_records_the_bytes_serialised(cut_s, sent_bytes):
    """1000 bytes at 8 kbit/s serialise in 1 s, then 0.5 s of latency."""
    sim = Simulation()
    link = Link(sim, "client0:uplink", bandwidth_bps=8000.0, latency_s=0.5)
    _interrupt_at(sim, link.transfer("send_activations", 0, 1000), cut_s)
    (e,) = sim.trace
    assert (e.start_s, e.end_s, e.payload_bytes, e.cut_off) == (0.0, cut_s, sent_bytes, True)
    assert link.free_at_s == pytest.approx(min(cut_s, 1.0))


def test_transfer_cut_while_waiting_for_the_link_records_nothing():
    sim = Simulation()
    link = Link(sim, "client0:uplink", bandwidth_bps=8000.0, latency_s=0.0)
    sim.env.process(link.transfer("send_activations", 0, 1000))  # holds the link 0..1
    _interrupt_at(sim, link.transfer("send_activations", 0, 1000), 0.5)
    assert [(e.end_s, e.cut_off) for e in sim.trace] == [(1.0, False)]
    assert link.free_at_s == 1.0  # the transfer before still held it until 1


def test_a_link_cut_by_the_deadline_is_free_from_the_cut_whatever_the_unwinding_order():
    """Two transfers booked back to back on one link (0-10 s and 10-14 s of
    serialisation), both interrupted at 1 s by the round deadline, in either order: the
    link is free from 1 s, so a transfer asked at 2 s starts at 2 s."""
    import simpy

    for order in ((0, 1), (1, 0)):
        sim = Simulation()
        link = Link(sim, "client0:uplink", bandwidth_bps=8.0, latency_s=0.0)

        def send(payload_bytes: int, at: float, sim=sim, link=link):
            yield sim.env.timeout(at)
            try:
                yield from link.transfer("send_activations", 0, payload_bytes)
            except simpy.Interrupt:
                pass

        jobs = [sim.env.process(send(10, 0.0)), sim.env.process(send(4, 0.0))]

        def cut(order=order, jobs=jobs, sim=sim):
            yield sim.env.timeout(1.0)
            for i in order:
                jobs[i].interrupt()

        sim.env.process(cut())
        sim.env.process(send(3, 2.0))
        sim.env.run()
        assert [(e.start_s, e.end_s, e.cut_off) for e in sim.trace] == [
            (0.0, 1.0, True), (2.0, 5.0, False)], order


def test_the_trace_orders_rows_recorded_ahead_and_counts_on_after_a_drop():
    """Work whose times are known in advance may be recorded before it ends; a round's
    rows are then put in order of completion (ties in the order recorded), and ``seq``
    counts from the run's first activity even after written rows are dropped."""
    sim = Simulation()
    sim.record("client0", "client_train", 0, 0.0, 3.0)  # ends last, recorded first
    sim.record("client1", "client_train", 1, 0.0, 1.0)
    sim.record("client2", "client_train", 2, 0.0, 1.0)
    sim.trace.sort_from(0)
    assert [(e.client_id, e.seq) for e in sim.trace] == [(1, 0), (2, 1), (0, 2)]
    assert list(sim.trace.columns()["client_id"]) == [1, 2, 0]
    sim.trace.drop()
    sim.record("server", "server_train", 0, 3.0, 4.0)
    assert (len(sim.trace), sim.trace.recorded, sim.trace[0].seq) == (1, 4, 3)
    assert list(sim.trace.columns()["seq"]) == [3]


def test_rows_added_as_columns_read_and_sort_as_rows_recorded_one_by_one():
    """A block of rows added as columns (a booked round) reads, sorts from any row and
    drops as the same rows recorded one by one would."""
    import numpy as np
    import pandas as pd

    rows = [("client0", "client_train", 0, 0.0, 3.0), ("client1", "client_train", 1, 0.0, 1.0),
            ("client2", "client_train", 2, 0.0, 1.0), ("server", "server_train", 0, 0.5, 2.0)]
    for cut in range(len(rows) + 1):
        one_by_one, blocked = Simulation(), Simulation()
        one_by_one.record("server", "warm_up", -1, 0.0, 0.5)
        blocked.record("server", "warm_up", -1, 0.0, 0.5)
        for sim in (one_by_one, blocked):
            sim.round = 1
        for r in rows:
            one_by_one.record(*r)
        block = rows[:cut]
        if block:
            blocked.trace.add_columns({
                "round": np.ones(cut, dtype=np.int64),
                "actor": pd.Categorical([r[0] for r in block]),
                "activity": [r[1] for r in block],
                "client_id": np.array([r[2] for r in block], dtype=np.int64),
                "start_s": np.array([r[3] for r in block]), "end_s": np.array([r[4] for r in block]),
                "queue_s": np.zeros(cut), "payload_bytes": np.zeros(cut, dtype=np.int64),
                "flops": np.zeros(cut), "cut_off": np.zeros(cut, dtype=bool)})
        for r in rows[cut:]:
            blocked.record(*r)
        assert len(blocked.trace) == len(one_by_one.trace) == 5
        assert list(blocked.trace) == list(one_by_one.trace), cut
        for start in (0, 1, 2):
            a, b = copy.deepcopy(one_by_one.trace), copy.deepcopy(blocked.trace)
            a.sort_from(start)
            b.sort_from(start)
            assert list(b) == list(a), (cut, start)
            assert {f: list(v) for f, v in b.columns(start).items()} == \
                {f: list(v) for f, v in a.columns(start).items()}, (cut, start)
        blocked.trace.drop()
        blocked.record("server", "server_train", 0, 3.0, 4.0)
        assert (len(blocked.trace), blocked.trace.recorded, blocked.trace[0].seq) == (1, 6, 5)


def test_wait_until_lands_on_an_instant_no_single_delay_reaches():
    """From 0.0952199679508688 s no float delay reaches 0.22135351984977317 s (the sum
    rounds to its neighbours); a booked round ending there must still end there exactly,
    as its processes would have."""
    from sflsim.engine import delay_to, wait_until

    now, at = 0.0952199679508688, 0.22135351984977317
    assert now + delay_to(now, at) != at
    for start, end in ((now, at), (0.0, 1e-300), (1.0, 1.0), (3.0, 7.000000000000001)):
        env = simpy.Environment(initial_time=start)
        env.run(until=env.process(wait_until(env, end)))
        assert env.now == end


def test_a_cut_off_at_an_instant_no_single_delay_reaches_is_processed_there():
    """The same instant as a round deadline: the cut-off event is processed at it exactly,
    after a timeout that ends there too (its priority puts it last)."""
    from sflsim.engine import cut_off_at, wait_until

    now, at = 0.0952199679508688, 0.22135351984977317
    env, seen = simpy.Environment(initial_time=now), []

    def work():
        yield from wait_until(env, at)
        seen.append(("work", env.now))

    def deadline():
        yield cut_off_at(env, at)
        seen.append(("cut", env.now))

    env.process(deadline())
    env.process(work())
    env.run()
    assert seen == [("work", at), ("cut", at)]
