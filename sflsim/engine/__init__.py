"""SimPy engine: simulated compute, links, the server queue and the trace. No torch."""

from sflsim.engine.simulation import (
    Link,
    Process,
    Server,
    Simulation,
    TraceEvent,
    transfer_time_s,
)

__all__ = ["Link", "Process", "Server", "Simulation", "TraceEvent", "transfer_time_s"]
