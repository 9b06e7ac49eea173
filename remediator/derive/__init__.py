"""Signal derivation: one report plus what was remembered from the host's earlier reports ->
the signals the rules match, and the memory to keep. Pure functions; docs/signals.md lists
every signal kind.
"""

from remediator.derive.core import Derived, HostFacts, derive
from remediator.derive.late import derive_late
from remediator.derive.memory import HostMemory, load_memory

__all__ = ["Derived", "HostFacts", "HostMemory", "derive", "derive_late", "load_memory"]
