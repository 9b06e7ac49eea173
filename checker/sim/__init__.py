"""A simulated fleet: virtual hosts with real-looking inventories and injected faults.

See docs/simulated-fleet.md. Its reports are ordinary `checker.schemas.Report`
documents and go through the same ingest path as a real agent's.
"""

from checker.sim.fleet import FAULT_KINDS, Fault, SimulatedFleet, VirtualHost

__all__ = ["FAULT_KINDS", "Fault", "SimulatedFleet", "VirtualHost"]
