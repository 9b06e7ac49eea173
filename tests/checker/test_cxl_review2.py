"""The second operator review's CXL findings at the signal level (remediator/derive/cxl_kernel.py
fold_memdev_aer, remediator/derive/cxl_down.py group_under_ports): a restart line alone is an attempt
whose outcome is unknown, a PCIe drain of a memdev's function is never downgraded by folding, and
devices down below one port are one signal of the port. The decision-level cases are
tests/decisions/cases_cxl_review2.py."""

from __future__ import annotations

from checker.schemas import CxlMemdev, CxlRasState
from remediator.derive.cxl_kernel import fold_memdev_aer
from remediator.signals import SignalValue
from tests.checker.test_cxl_review import MEM0, MEM1, signals

RESTART = "[ 5.1] cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset\n"


def _pcie(subject: str, disposition: str) -> SignalValue:
    detail = {"kind": "pcie_aer_uncorrected", "disposition": disposition, "error_types": ["UncorrIntErr"]}
    return SignalValue("device_event_count", subject, 1.0, detail)


def test_a_restart_line_alone_is_an_attempt_and_never_downgrades_a_pcie_drain() -> None:
    # cxl_slot_reset prints the restart before device_attach(): no "error resume successful", outcome unknown
    alone = signals(RESTART)[("cxl_device_down", MEM1)]
    assert (alone.detail["resume"], alone.detail["drain"], alone.detail["memory_lost"]) == ("unknown", False, False)
    assert "recovery outcome unknown" in alone.detail["reason"]
    drained = _pcie("0000:36:00.0", "drain")
    fold_memdev_aer([drained, alone])
    assert (drained.detail["disposition"], alone.detail["drain"]) == ("cxl_memory", True)
    assert alone.detail["reason"].startswith("uncorrected PCIe error on 0000:36:00.0 not recovered (UncorrIntErr)")
    # a recovered non-fatal error (no drain) folds into the in-service CXL signal and changes nothing
    quiet = signals(RESTART)[("cxl_device_down", MEM1)]
    recovered = _pcie("0000:36:00.0", "recovered")
    fold_memdev_aer([recovered, quiet])
    assert (recovered.detail["disposition"], quiet.detail["drain"]) == ("cxl_memory", False)


def test_two_devices_down_below_a_shared_port_are_one_signal_of_the_port() -> None:
    shared = ["0000:36:01.0", "0000:35:00.0", "0000:34:02.0"]
    devices = [
        CxlMemdev(memdev="mem0", serial=int(MEM0, 16), host="0000:37:00.0", ports=shared),
        CxlMemdev(memdev="mem1", serial=int(MEM1, 16), host="0000:38:00.0", ports=["0000:36:02.0", *shared[1:]]),
    ]
    text = (
        "[ 5.1] cxl_pci 0000:37:00.0: mem0: frozen state error detected, disable CXL.mem\n"
        "[ 5.2] cxl_pci 0000:38:00.0: mem1: frozen state error detected, disable CXL.mem\n"
    )
    found = list(signals(text, section=CxlRasState(devices=devices)).values())
    fold_memdev_aer(found)
    # no AER line: grouped under the nearest port they share (the switch's upstream port)
    assert [(s.kind, s.subject) for s in found] == [("cxl_device_down", "0000:35:00.0")]
    group = found[0].detail
    assert group["candidates"][:2] == [
        "the port 0000:35:00.0 and its link (every device that went down sits below it)",
        "the ports above it: 0000:34:02.0",
    ]
    assert (group["drain"], group["memory_lost"], group["functions"]) == (True, True, ["0000:37:00.0", "0000:38:00.0"])
    # one device down alone stays the device's own signal
    one = list(signals(text.splitlines(keepends=True)[0], section=CxlRasState(devices=devices)).values())
    fold_memdev_aer(one)
    assert [(s.kind, s.subject) for s in one] == [("cxl_device_down", MEM0)]
