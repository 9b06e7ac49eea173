"""The demo's DIMM swap (checker.sim.repairs, wired as a reaction to a resolve in api/embedded.py): the swapped
slot's fault leaves with the old DIMM, and the repair's load test on the virtual host answers pass, fail or
gap as the real run would (checker.sim.stalls.verify_memory_under_load)."""

from __future__ import annotations

import threading

from api.embedded import simulated_technician
from checker.sim.repairs import replace_dimm
from checker.sim.stalls import verify_memory_under_load
from tests.builders.observations import T0, clean_fleet, host_for
from ticketing.lifecycle import LifecycleEvent
from ticketing.models import Repair, Ticket

PARAMS = {"seconds": 600, "stall_threshold_ms": 100.0, "drained": True}  # the centre confirmed the drain


def faulty(kind: str = "dimm_ce_storm", *, extra: str | None = None):  # type: ignore[no-untyped-def]
    fleet = clean_fleet()
    host = host_for(fleet, kind)
    host.inject(fleet.fault(kind, 1))  # type: ignore[arg-type]
    if extra:
        host.inject(fleet.fault(extra))  # type: ignore[arg-type]
    return fleet, host


def test_swapping_the_faulty_dimm_passes_the_load_test() -> None:
    _fleet, host = faulty()
    boot = host.boot_id
    assert verify_memory_under_load(host, PARAMS)["verdict"] == "fail"  # before the swap: new CEs under load
    swapped = replace_dimm(host, host.dimms[1].label, "NEWSERIAL1", T0)
    assert (swapped["replaced"], swapped["cleared"]) == (host.dimms[1].locator, ["dimm_ce_storm"])
    assert host.dimms[1].serial == "NEWSERIAL1"
    assert host.boot_id != boot
    assert verify_memory_under_load(host, PARAMS)["verdict"] == "pass"


def test_swapping_another_slot_leaves_the_fault_and_fails() -> None:
    _fleet, host = faulty()
    assert replace_dimm(host, host.dimms[0].locator, "NEWSERIAL0", T0)["cleared"] == []
    found = verify_memory_under_load(host, PARAMS)
    assert found["verdict"] == "fail"
    assert found["edac_new"]


def test_no_stressapptest_is_a_gap_after_a_good_swap() -> None:
    _fleet, host = faulty(extra="verify_tool_missing")
    replace_dimm(host, host.dimms[1].locator, "NEWSERIAL1", T0)
    assert verify_memory_under_load(host, PARAMS)["verdict"] == "gap"


def test_a_resolve_in_the_demo_swaps_the_recorded_dimm() -> None:
    fleet, host = faulty()
    ticket = Ticket(hostname=host.hostname, part_type="dimm", part=host.dimms[1].label)
    ticket.repairs = [Repair(part=host.dimms[1].label, old_serial="X", new_serial="NEWSERIAL1", replaced_at=T0)]
    event = LifecycleEvent(
        ticket=ticket, kind="resolved", actor="user:tech", at=T0, before="in_progress", after="resolved"
    )
    simulated_technician(fleet, threading.RLock())(None, event)
    assert not host.faults
    assert host.dimms[1].serial == "NEWSERIAL1"
    other = Ticket(hostname=host.hostname, part_type="disk", part="nvme0n1")
    simulated_technician(fleet, threading.RLock())(None, LifecycleEvent(other, "resolved", "u", T0, "", "resolved"))
