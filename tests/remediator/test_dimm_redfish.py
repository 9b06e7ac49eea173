"""Which DIMM by the BMC's Redfish inventory (remediator/dimm_redfish.py): a serial only when certain, on the
real Supermicro, HPE and Dell samples as the agent's parsers read them."""

from __future__ import annotations

import json
from typing import Any

from bench.samples import sample
from checker.parsers.redfish_inventory import parse_memory
from checker.parsers.redfish_log import parse_log_entries
from remediator.dimm_redfish import bmc_counts, inventory_of_this_boot, latest_modules, match_module, merge_part
from remediator.evidence import _dimm
from remediator.models import Signal

UNCERTAIN_PART = {"certain": False, "serial": None, "locator": None, "candidates": [], "method": "none", "note": "?"}


def module(name: str, metrics: str | None = None) -> dict[str, Any]:
    doc = json.loads(sample(f"redfish/{name}"))
    extra = json.loads(sample(f"redfish/{metrics}")) if metrics else None
    parsed = parse_memory(doc, extra).value
    assert parsed is not None
    return parsed.model_dump(mode="json")


SUPERMICRO = "supermicro-x10sdv-memory-dimmb1-health-ok.json"
HPE = "hpe-ilo5-dl325-gen10plus-memory-proc1dimm1-memorylocation.json"
DELL = "dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"


def test_the_supermicro_log_names_dimmb1_and_its_memory_3_is_certain() -> None:
    log = json.loads(sample("redfish/supermicro-x10sdv-log1-entries-correctable-ecc-dimmb1-x64-no-severity.json"))
    components = {e.component for e in parse_log_entries(log).value if e.sensor_type == "Memory"}
    assert components == {"DIMMB1"}  # '[ OEM ] Correctable ECC @DIMMB1'
    found = match_module("DIMMB1", None, [module(SUPERMICRO)])
    assert found is not None
    assert found.certain
    assert found.module is not None
    assert (found.module["serial"], found.method) == ("16E1FD2E", "Redfish DeviceLocator")
    part = merge_part(dict(UNCERTAIN_PART), found, bmc_named=True)
    assert (part["certain"], part["serial"], part["locator"], part["model"]) == (
        True,
        "16E1FD2E",
        "DIMMB1",
        "36ASF2G72PZ-2G1B1",
    )


def test_a_locator_two_modules_share_gives_candidates_and_no_serial() -> None:
    one = module(SUPERMICRO)
    other = {**one, "uri": "/redfish/v1/Systems/1/Memory/7", "id": "7", "serial": "OTHER0001", "socket": 1}
    found = match_module("DIMMB1", None, [one, other])
    assert found is not None
    assert not found.certain
    assert len(found.candidates) == 2
    part = merge_part(dict(UNCERTAIN_PART), found)
    assert (part["certain"], part["serial"]) == (False, None)
    assert [c["serial"] for c in part["redfish"]["candidates"]] == ["16E1FD2E", "OTHER0001"]


def test_hpe_memory_location_with_its_base_is_certain_and_without_a_base_is_not() -> None:
    hpe = module(HPE)
    assert (hpe["socket"], hpe["channel"], hpe["slot"], hpe["location_base"]) == (1, 3, 1, 1)
    served = {"source": "redfish", "socket": 1, "memory_controller": 3, "channel": 3, "slot": 1, "location_base": 1}
    found = match_module("some other name", served, [hpe])
    assert found is not None
    assert (found.certain, found.method) == (True, "Redfish MemoryLocation")
    # the same numbers counted from 0 are another slot; no base known: candidates only
    other_base = match_module("x", {**served, "location_base": 0}, [hpe])
    assert other_base is not None
    assert not other_base.certain
    unknown = match_module("x", {**served, "location_base": None}, [hpe])
    assert unknown is not None
    assert not unknown.certain
    assert [m["serial"] for m in unknown.candidates] == ["438AD388"]


def test_dell_without_memory_location_is_never_placed_by_numbers() -> None:
    dell = module(DELL, "dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json")
    assert dell["location_source"] == "oem_hint"
    assert match_module("CPU1 channel 0", {"socket": 1, "channel": 0, "slot": 0, "location_base": 1}, [dell]) is None
    # its DeviceLocator as served still names it ('DIMM A1'; 'DIMMA1' is another text)
    found = match_module("DIMM A1", None, [dell])
    assert found is not None
    assert found.certain
    # Dell's log spells it DIMM_A1 (review finding 8): the same letters and digits, no other DIMM's: certain
    spelled = match_module("DIMM_A1", None, [dell])
    assert spelled is not None
    assert spelled.module is not None
    assert (spelled.certain, spelled.method) == (True, "Redfish DeviceLocator, letters and digits")
    assert spelled.module["device_locator"] == "DIMM A1"
    # two modules spelled alike: candidates, no serial
    twin = {**dell, "uri": "/redfish/v1/Systems/System.Embedded.1/Memory/DIMM.Socket.A01b", "device_locator": "DIMM-A1"}
    both = match_module("DIMM_A1", None, [dell, twin])
    assert both is not None
    assert (both.certain, len(both.candidates)) == (False, 2)
    assert match_module("DIMM_A2", None, [dell]) is None


def test_the_host_attribution_stands_and_a_disagreement_is_uncertain() -> None:
    found = match_module("DIMMB1", None, [module(SUPERMICRO)])
    same = {**UNCERTAIN_PART, "certain": True, "serial": "16E1FD2E", "locator": "DIMMB1", "method": "label map"}
    assert merge_part(same, found)["certain"] is True
    other = {**same, "serial": "DIFFERENT"}
    merged = merge_part(other, found)
    assert (merged["certain"], merged["serial"]) == (False, None)
    assert "16E1FD2E" in merged["note"]
    assert "DIFFERENT" in merged["note"]


TWO_MODULES = [
    {"kind": "dimm", "uri": "/redfish/v1/Systems/1/Memory/1", "device_locator": "DIMM_A1", "serial": "SER-A1"},
    {"kind": "dimm", "uri": "/redfish/v1/Systems/1/Memory/2", "device_locator": "DIMM_B1", "serial": "SER-B1"},
]
REFUSED = {
    "certain": False,
    "serial": None,
    "locator": None,
    "method": "label map and EDAC label disagree",
    "candidates": [{"locator": "DIMM_B1", "serial": "SER-B1"}, {"locator": "DIMM_A1", "serial": "SER-A1"}],
    "note": "label map says DIMM_B1, EDAC label says DIMM_A1: confirm",
}


def test_an_edac_label_equal_to_a_device_locator_never_overrides_the_hosts_refusal() -> None:
    """The reviewer's probe_merge: the stale-label case. The EDAC label DIMM_A1 is also a unique Redfish
    DeviceLocator, but the label map says DIMM_B1: the host refused to name the DIMM and that stands."""
    found = match_module("DIMM_A1", None, TWO_MODULES)
    assert found is not None
    assert found.certain  # by itself the text matches one module
    for named in (False, True):  # not even a BMC-named signal overrides a "disagree"
        merged = merge_part(dict(REFUSED), found, bmc_named=named)
        assert (merged["certain"], merged["serial"], merged["method"]) == (False, None, REFUSED["method"])
        assert {c["serial"] for c in merged["candidates"]} == {"SER-A1", "SER-B1"}
    # an uncertain host attribution without a refusal is filled in only for a BMC-named signal
    assert merge_part(dict(UNCERTAIN_PART), found)["certain"] is False
    assert merge_part(dict(UNCERTAIN_PART), found)["candidates"][0]["serial"] == "SER-A1"
    assert merge_part(dict(UNCERTAIN_PART), found, bmc_named=True)["serial"] == "SER-A1"


def test_the_ticket_evidence_upgrades_only_a_subject_the_bmc_named() -> None:
    edac = Signal(kind="dimm_ce_rate", subject="DIMM_A1", value=1.0, detail={"mc": 0, "label": "DIMM_A1"})
    bmc = Signal(kind="bmc_dimm_ce_rate", subject="DIMM_A1", value=1.0, detail={"source": "redfish"})
    from_edac = _dimm("DIMM_A1", {}, "", [edac, bmc], TWO_MODULES)
    assert (from_edac["certain"], from_edac["serial"]) == (False, None)
    assert [c["serial"] for c in from_edac["candidates"]] == ["SER-A1"]
    from_bmc = _dimm("DIMM_A1", {}, "", [bmc], TWO_MODULES)
    assert (from_bmc["certain"], from_bmc["serial"]) == (True, "SER-A1")


def test_two_certain_answers_that_disagree_list_both_dimms() -> None:
    found = match_module("DIMM_A1", None, TWO_MODULES)
    host = {**UNCERTAIN_PART, "certain": True, "serial": "SER-B1", "locator": "DIMM_B1", "method": "label map"}
    merged = merge_part(host, found, bmc_named=True)
    assert (merged["certain"], merged["method"]) == (False, "disagree")
    assert [(c["serial"], c["source"]) for c in merged["candidates"]] == [("SER-B1", "host"), ("SER-A1", "redfish")]


def test_gpu_hbm_and_reports_without_memory_match_nothing() -> None:
    hbm = {**module(SUPERMICRO), "kind": "gpu_hbm"}
    assert match_module("DIMMB1", None, [hbm]) is None
    reports = [
        {"observations": {"redfish": {"memory": [module(SUPERMICRO)]}}},
        {"observations": {"redfish": {"memory": None}}},  # between the hourly inventory reads
    ]
    assert [m["serial"] for m in latest_modules(reports)] == ["16E1FD2E"]
    assert latest_modules([{"observations": {}}]) == []


def test_the_bmc_counts_join_an_edac_named_dimm_by_its_certain_serial() -> None:
    served = {**module(SUPERMICRO), "ce_lifetime": 7320}
    observations = {"redfish": {"memory": [served]}}
    assert bmc_counts("CPU_SrcID#0_MC#0_Chan#1_DIMM#0", observations) == []  # the EDAC label is not its name
    joined = bmc_counts("CPU_SrcID#0_MC#0_Chan#1_DIMM#0", observations, "16E1FD2E")
    assert joined == [{"bmc_ce": 7320, "bmc_ue": None, "bmc_counter": "lifetime"}]
    assert bmc_counts("CPU_SrcID#0_MC#0_Chan#1_DIMM#0", observations, "OTHER") == []


def test_an_inventory_read_before_the_current_boot_gives_candidates_only() -> None:
    """Review note 13: within the hour after a swap the newest inventory may list the removed DIMM."""
    served = module(SUPERMICRO)
    read = {"host": {"boot_id": "boot-1"}, "observations": {"redfish": {"memory": [served]}}}
    same = [read, {"host": {"boot_id": "boot-1"}, "observations": {}}]
    rebooted = [read, {"host": {"boot_id": "boot-2"}, "observations": {}}]
    assert inventory_of_this_boot(same) is True
    assert inventory_of_this_boot(rebooted) is False
    bmc = Signal(kind="bmc_dimm_ce_rate", subject="DIMMB1", value=1.0, detail={"source": "redfish"})
    assert _dimm("DIMMB1", {}, "", [bmc], [served])["serial"] == "16E1FD2E"
    stale = _dimm("DIMMB1", {}, "", [bmc], [served], redfish_current=False)
    assert (stale["certain"], stale["serial"]) == (False, None)
    assert [c["serial"] for c in stale["candidates"]] == ["16E1FD2E"]
    assert "before the host's current boot" in stale["redfish"]["note"]
