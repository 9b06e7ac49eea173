"""A simulated fleet: virtual hosts with real-looking inventories and injected faults.

See docs/simulated-fleet.md. Its reports are ordinary `checker.schemas.Report`
documents and go through the same ingest path as a real agent's.
"""

from checker.sim.faults import FAULT_KINDS, Fault
from checker.sim.fleet import SimulatedFleet
from checker.sim.hardware import HARDWARE_CLASSES
from checker.sim.host import VirtualHost

__all__ = ["FAULT_KINDS", "HARDWARE_CLASSES", "Fault", "SimulatedFleet", "VirtualHost"]
