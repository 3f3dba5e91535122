"""Network topology (networkx), shared links (processor sharing) and bandwidth traces. No torch."""

from sflsim.network.bandwidth_trace import BandwidthTrace, read_trace
from sflsim.network.shared import SharedLink, fair_shares
from sflsim.network.topology import Hop, Network, Path

__all__ = ["BandwidthTrace", "Hop", "Network", "Path", "SharedLink", "fair_shares", "read_trace"]
