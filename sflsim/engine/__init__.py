"""SimPy engine: simulated compute, links, the server queue and the trace. No torch."""

from sflsim.engine.link import Link, transfer_time_s
from sflsim.engine.server import FifoQueue, FifoResource, Server
from sflsim.engine.simulation import Process, Simulation, cut_off_at, delay_to, wait_until
from sflsim.engine.trace import Trace, TraceEvent

__all__ = ["FifoQueue", "FifoResource", "Link", "Process", "Server", "Simulation", "Trace",
           "TraceEvent", "cut_off_at", "delay_to", "transfer_time_s", "wait_until"]
