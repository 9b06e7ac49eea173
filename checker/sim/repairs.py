"""What a technician's hands do to a virtual host: a DIMM swapped (the demo's resolve of a DIMM ticket).

Not a remediation action (nothing on a host can swap its own DIMM): the embedded demo calls it when a
DIMM ticket is resolved (api/embedded.py), before the repair's load test reaches the host. The slot named
by the resolve gets a new DIMM and the host is powered off and on for it; the faults of that slot go with
the old DIMM. A swap of another slot than the faulty one (a wrong candidate pulled) leaves the fault, and
the load test finds its errors (docs/simulated-fleet.md).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from checker.sim import capacity
from checker.sim.host import VirtualHost

DIMM_FAULTS = frozenset({"dimm_ce_storm", "dimm_ce_moderate", "dimm_ue", "cmci_storm"})
"""The faults that live in one DIMM and leave with it."""


def _key(name: str) -> str:
    return re.sub(r"[^0-9a-z]", "", name.casefold())


def replace_dimm(host: VirtualHost, slot: str, new_serial: str, at: dt.datetime | None = None) -> dict[str, Any]:
    """Swap the DIMM `slot` names (its EDAC label or its locator, letters and digits compared): a cold
    restart, the slot's faults gone, the new serial in its place. An unknown slot changes nothing."""
    wanted = _key(slot)
    # the BMC's name for a slot may prefix the locator ("DIMM A3" for A3: checker/sim/capacity.py)
    index = next(
        (i for i, d in enumerate(host.dimms) if wanted in (_key(d.label), _key(d.locator), "dimm" + _key(d.locator))),
        None,
    )
    if index is None or not wanted:
        return {"replaced": None, "cleared": []}
    dimm = host.dimms[index]
    old_serial = dimm.serial
    dimm.serial = new_serial[:32] or dimm.serial
    # a DIMM firmware had disabled (capacity_lost, dimm_disabled) goes too: the new one trains
    disabled = capacity.fault_of(host) if capacity.lost(host) == "dimm_disabled" else None
    gone = [
        f
        for f in host.faults
        if (f.kind in DIMM_FAULTS and f.dimm_index == index)
        or (f is disabled and f.dimm_index % len(host.dimms) == index)
    ]
    cleared = [f.kind for f in gone]
    host.faults = [f for f in host.faults if all(f is not g for g in gone)]
    host.reboot(at)  # the chassis is powered off for the swap: the counters start again
    return {"replaced": dimm.locator, "old_serial": old_serial, "new_serial": dimm.serial, "cleared": cleared}
