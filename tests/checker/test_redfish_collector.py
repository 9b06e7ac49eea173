"""The redfish collector against a local Redfish service (tests/checker/redfish_server.py) serving the real
samples at their URIs: what lands in sel, sensors and the redfish section, incremental reads across
cycles, paging, a cleared log, a BMC that hangs or sends malformed JSON, the session, and how it shares
its session (tests/checker/test_redfish_agent.py: the agent around it)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from checker.collectors import ipmi
from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState
from checker.collectors.redfish import RedfishCollector
from checker.collectors.redfish_client import RedfishSettings
from checker.cycle import run_cycle
from checker.schemas import Report
from remediator.derive.sel import classify, is_clear
from tests.checker.redfish_server import (
    DELL_LCLOG,
    DELL_SEL,
    PASSWORD,
    USER,
    RedfishService,
    collection,
    dell,
    load,
    skeleton,
)

SMC_LOG = "/redfish/v1/Systems/1/LogServices/Log1/Entries"
HPE_IML = "/redfish/v1/Systems/1/LogServices/IML/Entries"
NO_HOST = SnapshotHost(Path("/nonexistent/fleetfix-empty-snapshot"))  # no files, no tools: only the BMC answers


def collector_for(service: RedfishService, password_file: Path, **overrides: Any) -> RedfishCollector:
    settings = RedfishSettings(url=service.url, username=USER, password_file=password_file, **overrides)
    return RedfishCollector(settings, "redfish")


def cycle(collector: RedfishCollector, state: CollectorState, budget: float = 30.0) -> Report:
    report = run_cycle(
        NO_HOST, hostname="h", collectors={"redfish": collector}, state=state, timeouts={"redfish": budget}
    )
    state.commit()
    return report


def test_dell_service_fills_sel_sensors_and_the_redfish_section(service: RedfishService, password_file: Path) -> None:
    dell(service)
    report = cycle(collector_for(service, password_file, max_entries=50), CollectorState())
    run = report.collectors["redfish"]
    assert (run.status, run.source) == ("ok", "redfish"), run
    obs = report.observations
    assert obs.sel is not None
    assert obs.redfish is not None
    assert obs.sensors is not None
    assert len(obs.sel.entries) == 16 + 50
    assert [e.record_id for e in obs.sel.entries] == list(range(1, 67))  # the collector's own sequence
    assert obs.sel.last_record_id == 66
    assert obs.sel.entry_count == 16 + 4351  # both services' Members@odata.count
    by_service = {s.entries_uri: s for s in obs.redfish.log_services}
    assert by_service[DELL_SEL].entry_count == 16
    assert by_service[DELL_SEL].first_read
    assert by_service[DELL_SEL].newest_id == "16"
    assert by_service[DELL_SEL].entry_format == "SEL"
    assert by_service[DELL_LCLOG].entry_count == 4351
    assert by_service[DELL_LCLOG].entry_format == "Oem:Dell"
    # SWC9005 'Critical' and logins are no hardware fault; the SEL's chassis openings are recorded only
    assert {classify(e) for e in obs.sel.entries} == {None, "chassis_intrusion"}
    assert not any(classify(e) for e in obs.sel.entries if e.log_service == DELL_LCLOG)
    assert any(is_clear(e) for e in obs.sel.entries)
    assert len(obs.sensors) == 20
    [dimm] = obs.redfish.memory or []
    assert (dimm.serial, dimm.ce_lifetime, dimm.alarm_trips["UncorrectableECCError"]) == ("19949A6B", None, False)
    firmware = {f.id: f for f in obs.redfish.firmware or []}
    assert len(firmware) == 33
    assert firmware["Installed-109092-DD02__Disk.Bay.0:Enclosure.Internal.0-1:RAID.SL.3-1"].name == (
        "Disk 0 in Backplane 1 of RAID Controller in SL 3"
    )
    assert firmware["Installed-25227-5.10.00.00__iDRAC.Embedded.1-1"].version == "5.10.00.00"
    Report.model_validate_json(report.model_dump_json())  # the report as sent still validates
    assert PASSWORD not in report.model_dump_json()


def test_hpe_supermicro_intel_and_gpu_samples_through_the_collector(
    service: RedfishService, password_file: Path
) -> None:
    hbm = "/redfish/v1/Systems/HGX_Baseboard_0/Memory/GPU_0_DRAM_0"
    skeleton(
        service,
        systems={
            "1": {
                "logs": [HPE_IML],
                "memory": ["/redfish/v1/Systems/1/Memory/proc1dimm1", "/redfish/v1/Systems/1/Memory/3"],
            },
            "HGX_Baseboard_0": {"memory": [hbm]},
        },
        chassis={
            "1": {"Thermal": "/redfish/v1/Chassis/1/Thermal", "Power": "/redfish/v1/Chassis/1/Power"},
            "RackMount/Baseboard": {"Power": "/redfish/v1/Chassis/RackMount/Baseboard/Power"},
        },
    )
    service.add(
        load("hpe-ilo5-dl325-gen10plus-iml-entries-psu-input-loss-nic-link-failure-trimmed.json"),
        load("hpe-ilo5-dl325-gen10plus-memory-proc1dimm1-memorylocation.json"),
        load("supermicro-x10sdv-memory-dimmb1-health-ok.json"),
        load("supermicro-x10sdv-thermal-all-sensors-absent-zero-readings.json"),
        load("hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json"),
        load("intel-s2600bpb-power-psu-lineinputvoltage-572-and-13.json"),
        load("supermicro-gb300-hgx-gpu0-hbm-memorymetrics-lifetime-ecc-row-remapping.json"),
        # our own Memory resource for the GPU's HBM, linking the real MemoryMetrics sample
        {
            "@odata.id": hbm,
            "Id": "GPU_0_DRAM_0",
            "MemoryDeviceType": "HBM3e",
            "Metrics": {"@odata.id": f"{hbm}/MemoryMetrics"},
        },
    )
    report = cycle(collector_for(service, password_file), CollectorState())
    run = report.collectors["redfish"]
    assert run.status == "ok", run
    obs = report.observations
    assert obs.redfish is not None
    assert obs.sel is not None
    assert obs.sensors is not None
    assert len(obs.sel.entries) == 25
    kinds = [classify(e) for e in obs.sel.entries]
    assert kinds.count("psu_input_lost") == 2
    assert kinds.count("power_unit_fault") == 2
    assert obs.redfish.sensors_absent == 12 + 2  # Supermicro's absent listing, HPE's two empty bays
    assert not any(r.kind in ("temperature", "fan") for r in obs.sensors)  # no 0 degC, no stopped fan
    assert any("not believed" in p for p in run.problems)
    assert {(p.bay, p.present) for p in obs.redfish.psus if p.bay in (1, 6)} == {(1, False), (6, False)}
    memory = {m.id: m for m in obs.redfish.memory or []}
    assert (memory["proc1dimm1"].location_base, memory["3"].location_base) == (1, 0)
    assert (memory["GPU_0_DRAM_0"].kind, memory["GPU_0_DRAM_0"].ce_lifetime) == ("gpu_hbm", 0)
    assert obs.redfish.firmware is None  # no UpdateService: not read, not "no firmware"


def smc_log(members: int) -> dict[str, Any]:
    """The Supermicro log (oldest first) as the BMC served it when it held only its first `members` entries."""
    doc = load("supermicro-x10sdv-log1-entries-correctable-ecc-dimmb1-x64-no-severity.json")
    doc["Members"] = doc["Members"][:members]
    doc["Members@odata.count"] = members
    return doc


def test_incremental_reads_across_cycles_oldest_first(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(smc_log(60))
    collector, state = collector_for(service, password_file), CollectorState()
    first = cycle(collector, state).observations.sel
    assert first is not None
    assert len(first.entries) == 60
    assert first.last_record_id == 60
    unchanged = cycle(collector, state).observations.sel
    assert unchanged is not None
    assert unchanged.entries == []
    assert unchanged.last_record_id == 60
    service.add(smc_log(65))
    second = cycle(collector, state).observations.sel
    assert second is not None
    assert [e.entry_id for e in second.entries] == ["61", "62", "63", "64", "65"]
    assert [e.record_id for e in second.entries] == [61, 62, 63, 64, 65]
    assert not second.cleared


def test_incremental_newest_first_and_a_cleared_log(service: RedfishService, password_file: Path) -> None:
    full = load("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json")
    older = copy.deepcopy(full)
    older["Members"] = older["Members"][4:]  # Ids 12..1: the log before its four newest entries
    older["Members@odata.count"] = 12
    skeleton(service, managers={"iDRAC.Embedded.1": {"logs": [DELL_SEL]}})
    service.add(older)
    collector, state = collector_for(service, password_file), CollectorState()
    assert len(cycle(collector, state).observations.sel.entries) == 12  # type: ignore[union-attr]
    service.add(full)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == ["13", "14", "15", "16"]
    assert not sel.cleared
    cleared = copy.deepcopy(full)
    cleared["Members"] = [full["Members"][-1]]  # only 'Log cleared.' (Id 1) left
    cleared["Members@odata.count"] = 1
    service.add(cleared)
    report = cycle(collector, state)
    sel = report.observations.sel
    assert sel is not None
    assert sel.cleared
    assert [e.entry_id for e in sel.entries] == ["1"]
    assert is_clear(sel.entries[0])
    assert sel.entries[0].record_id == 17  # our sequence goes on: the centre sees no ids going backwards
    [log] = report.observations.redfish.log_services  # type: ignore[union-attr]
    assert log.cleared
    assert log.entry_count == 1


def generated(ids: list[str], created: list[str]) -> list[dict[str, Any]]:
    """Log entries of our own, in the DMTF SEL shape (non-numeric Ids where the test needs them)."""
    return [
        {"@odata.id": f"{SMC_LOG}/{i}", "Id": i, "Created": c, "EntryType": "SEL", "EntryCode": "Assert",
         "SensorType": "Memory", "Message": f"Correctable ECC @DIMMA{n}"}
        for n, (i, c) in enumerate(zip(ids, created, strict=True))
    ]  # fmt: skip


def test_non_numeric_ids_are_followed_by_created_time(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    first = generated(["a7", "b2", "c9"], ["2024-01-01T00:00:00Z", "2024-01-01T00:00:05Z", "2024-01-01T00:00:05Z"])
    service.add(collection(SMC_LOG, [], Members=first, **{"Members@odata.count": 3}))
    collector, state = collector_for(service, password_file), CollectorState()
    assert [e.entry_id for e in cycle(collector, state).observations.sel.entries] == ["a7", "b2", "c9"]  # type: ignore[union-attr]
    more = first + generated(["d1", "e5"], ["2024-01-01T00:00:05Z", "2024-01-01T00:01:00+01:00"])
    service.add(collection(SMC_LOG, [], Members=more, **{"Members@odata.count": 5}))
    sel = cycle(collector, state).observations.sel
    # d1 shares c9's second (a tie broken by the Ids seen then); e5 is 23:01 UTC the previous day: not new
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == ["d1"]


def test_paging_follows_next_links_and_jumps_with_skip(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    stamps = [f"2024-01-01T00:{m // 60:02d}:{m % 60:02d}Z" for m in range(130)]
    members = generated([str(i) for i in range(1, 131)], stamps)

    service.paged[SMC_LOG] = (members[:120], 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    first = cycle(collector, state)
    sel = first.observations.sel
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == [str(i) for i in range(81, 121)]
    assert service.gets(SMC_LOG) == [SMC_LOG, f"{SMC_LOG}?$skip=80"]  # jumped to the newest, not walked
    [log] = first.observations.redfish.log_services  # type: ignore[union-attr]
    assert (log.first_read, log.read, log.truncated) == (True, 40, 0)
    service.requests.clear()
    service.paged[SMC_LOG] = (members, 50)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == [str(i) for i in range(121, 131)]
    # at the last entry reported: listed again (and filtered) to see a clear and refill (review r2 finding 2)
    assert service.gets(SMC_LOG) == [SMC_LOG, f"{SMC_LOG}?$skip=119"]


def test_a_hanging_bmc_is_contained(service: RedfishService, password_file: Path) -> None:
    dell(service)
    service.hang = {"/redfish/v1/Chassis/System.Embedded.1/Thermal"}
    state = CollectorState()
    collector = collector_for(service, password_file, timeout_s=0.5, max_entries=50)
    started = time.monotonic()
    report = run_cycle(
        NO_HOST,
        hostname="h",
        collectors={"redfish": collector, "sel": ipmi.collect_sel},
        state=state,
        timeouts={"redfish": 20.0},
    )
    assert time.monotonic() - started < 3.0  # one request's timeout, not sushy's retries
    run = report.collectors["redfish"]
    assert run.status == "ok"
    assert any("stopped answering" in p and "Thermal" in p for p in run.problems), run.problems
    assert report.observations.sel is not None
    assert len(report.observations.sel.entries) == 66
    assert report.collectors["sel"].status == "unavailable"  # the next collector ran (no ipmitool here)
    service.hang = {"/redfish/v1"}  # now the service root itself hangs: nothing to read
    report = run_cycle(NO_HOST, hostname="h", collectors={"redfish": collector}, state=state)
    assert report.collectors["redfish"].status == "unavailable"
    assert "did not answer" in (report.collectors["redfish"].reason or "")


def test_malformed_json_costs_only_that_resource(service: RedfishService, password_file: Path) -> None:
    dell(service)
    service.resources[DELL_LCLOG] = b'{"Members": [ {"Id": "1", '
    report = cycle(collector_for(service, password_file), CollectorState())
    run = report.collectors["redfish"]
    assert run.status == "ok"
    assert any(DELL_LCLOG in p and "not JSON" in p for p in run.problems)
    assert report.observations.sel is not None
    assert len(report.observations.sel.entries) == 16
    assert report.observations.sel.entry_count is None  # not 16: the Lclog's 4351 were not read, not cleared
    assert report.observations.sensors


def test_one_session_across_cycles_and_closed_at_the_end(service: RedfishService, password_file: Path) -> None:
    dell(service)
    collector, state = collector_for(service, password_file, max_entries=50), CollectorState()
    cycle(collector, state)
    cycle(collector, state)
    posts = [r for r in service.requests if r.method == "POST"]
    assert len(posts) == 1
    assert all(r.token == "token-1" for r in service.requests if r.method == "GET" and r.path != "/redfish/v1/")
    collector.close()
    assert [r.path for r in service.requests if r.method == "DELETE"] == ["/redfish/v1/SessionService/Sessions/token-1"]
    assert service.sessions == set()


def test_wrong_password_is_unavailable_and_never_shown(service: RedfishService, tmp_path: Path) -> None:
    dell(service)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    collector = RedfishCollector(RedfishSettings(url=service.url, username=USER, password_file=wrong), "redfish")
    report = cycle(collector, CollectorState())
    assert report.collectors["redfish"].status == "unavailable"
    assert "not-the-password" not in report.model_dump_json()


def test_dmtf_mockup_log_and_a_system_without_memory(service: RedfishService, password_file: Path) -> None:
    """DMTF's mockup serves a nextLink after its last member: not followed. A system with no Memory
    collection leaves `memory` null (not known), never an empty list (no DIMMs)."""
    log = "/redfish/v1/Systems/437XR1138R2/LogServices/Log1/Entries"
    skeleton(service, systems={"437XR1138R2": {"logs": [log]}})
    service.add(load("dmtf-public-rackmount1-log1-entries-sel-temperature-upper-critical-mockup.json"))
    report = cycle(collector_for(service, password_file), CollectorState())
    run = report.collectors["redfish"]
    assert (run.status, run.problems) == ("ok", [])
    assert service.gets(log) == [log]
    assert report.observations.sel is not None
    assert [e.event for e in report.observations.sel.entries] == [
        "Upper Critical going high: Temperature threshold exceeded"
    ] * 2
    assert report.observations.redfish is not None
    assert report.observations.redfish.memory is None
