"""SimPy engine: simulated compute, links, the server queue and the trace. No torch."""

from sflsim.engine.simulation import (
    FifoQueue,
    FifoResource,
    Link,
    Process,
    Server,
    Simulation,
    Trace,
    TraceEvent,
    cut_off_at,
    delay_to,
    transfer_time_s,
)

__all__ = ["FifoQueue", "FifoResource", "Link", "Process", "Server", "Simulation", "Trace",
           "TraceEvent", "cut_off_at", "delay_to",
           "transfer_time_s"]
