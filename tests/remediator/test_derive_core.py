"""derive() as a whole: time comes from the report, duplicates and late reports are harmless, memory is
the caller's (never mutated, JSON, bounded), and no valid report makes it raise."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.schemas import (
    DiskHealth,
    KernelEvent,
    KernelEventKind,
    KernelLogState,
    Observations,
    Report,
    SelEntry,
    SelState,
)
from checker.sim import SimulatedFleet
from remediator.derive import HostFacts, derive
from remediator.derive.kernel import BUCKETS
from remediator.derive.memory import MAX_GAPS, load_memory
from tests.builders.observations import (
    BASELINES,
    HOST,
    T0,
    Deriver,
    at,
    disk,
    edac,
    event,
    identity,
    interrupts,
    kernel_log,
    of,
    report,
    sel_entry,
    sel_state,
)


def busy_report(when: dt.datetime, seq: int) -> Report:
    return report(
        when,
        kernel_log=kernel_log(event("soft_lockup", seq, when, "CPU 3")),
        sel=sel_state(sel_entry(seq, "Power Supply", "Failure detected", component="PS1", when=when), count=seq),
        disks=[disk(reallocated_sectors=seq)],
        edac=edac(1000),
    )


def test_now_is_the_report_time_and_a_duplicate_yields_nothing() -> None:
    run = Deriver()
    first = run(busy_report(at(0), 10))
    assert of(first, "kernel_event_count")
    memory = run.memory
    again = derive(busy_report(at(0), 10), memory, HOST, baselines=BASELINES)
    assert again.signals == []
    assert again.changed is False
    assert again.memory == memory


def test_an_older_report_arriving_late_changes_nothing() -> None:
    run = Deriver()
    run(busy_report(at(0), 10))
    run(busy_report(at(2), 11))
    memory = copy.deepcopy(run.memory)
    late = derive(busy_report(at(1), 12), run.memory, HOST, baselines=BASELINES)
    assert (late.signals, late.changed, late.memory) == ([], False, memory)


def test_memory_is_not_mutated_and_changes_are_reported() -> None:
    run = Deriver()
    run(busy_report(at(0), 10))
    before = copy.deepcopy(run.memory)
    result = derive(busy_report(at(1), 11), run.memory, HOST, baselines=BASELINES)
    assert run.memory == before
    assert result.changed is True
    assert result.memory != before
    assert json.loads(json.dumps(result.memory)) == result.memory


def test_state_signals_do_not_depend_on_memory() -> None:
    first = derive(report(T0, edac=edac(1000)), {}, HOST, baselines=BASELINES)
    second = derive(report(at(1), edac=edac(1000)), first.memory, HOST, baselines=BASELINES)
    assert [s.kind for s in first.signals] == [s.kind for s in second.signals] == ["edac_poll_interval"]


def test_a_missing_section_keeps_its_memory() -> None:
    run = Deriver()
    run(report(at(0), disks=[disk(reallocated_sectors=5)]))
    run(report(at(1)))  # the SMART collector did not run this cycle
    assert of(run(report(at(2), disks=[disk(reallocated_sectors=9)])), "smart_reallocated_growth")[0].value == 4


def test_broken_or_foreign_memory_starts_afresh_without_raising() -> None:
    for memory in (
        {"v": 99, "at": "not a time"},
        {"at": "garbage", "sel": {"last": "x"}},
        {"sel": [1, 2, 3], "disks": {"a": "b"}, "klog": 7},
        {"irq": {"at": "2026-03-01T12:00:00+00:00", "cpus": {"3": "many"}}},
    ):
        result = derive(busy_report(at(5), 10), memory, HOST, baselines=BASELINES)
        assert result.changed
        assert load_memory(result.memory).at is not None


def test_one_bad_section_does_not_lose_the_others() -> None:
    run = Deriver()
    run(report(at(0), disks=[disk(reallocated_sectors=5)]))
    damaged = {**run.memory, "sel": "not a section"}
    result = derive(report(at(1), disks=[disk(reallocated_sectors=7)]), damaged, HOST, baselines=BASELINES)
    assert of(result.signals, "smart_reallocated_growth")[0].value == 2


def test_memory_stays_bounded_under_a_storm() -> None:
    run = Deriver()
    kinds = [k for k in KernelEventKind if k.value != "nic_link_up"]
    for minute in range(0, 48 * 60, 30):
        when = at(minute)
        events = [event(kind, minute * 1000 + i, when, f"dev{i}") for i, kind in enumerate(kinds)]
        many_disks = [disk(f"/dev/sd{i}", f"SER{i:04d}", reallocated_sectors=minute + i) for i in range(256)]
        isolated = list(range(2, 512))
        rows = {"TLB": [minute] * 512, "42": [minute] * 512}
        run(
            report(
                when,
                kernel_log=kernel_log(*events),
                disks=many_disks,
                identity=identity(isolated=isolated),
                interrupts=interrupts(512, rows),
            )
        )
    memory = run.memory
    assert all(len(buckets) <= BUCKETS + 1 for buckets in memory["klog"]["counts"].values())
    assert len(memory["disks"]) <= 64
    assert len(memory["irq"]["cpus"]) <= 64
    assert len(memory["gaps"]["klog:boot-1"]) <= MAX_GAPS  # the storm's kmsg read skips records: gaps, bounded
    # about 300 bytes a kernel-event kind (32 kinds since issue 16's classes and the CXL kernel lines), the
    # events' own times of the counted kinds (about 0.6 KB: remediator.recount) plus the capped disk, IRQ and
    # capacity sections: 19.4 KB measured; every part is capped, so the whole is
    assert len(json.dumps(memory)) < 20_000


# -- fuzz ------------------------------------------------------------------------------

_text = st.text(max_size=40)
_when = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2099, 12, 31), timezones=st.just(dt.UTC))
_events = st.builds(
    KernelEvent,
    kind=st.sampled_from(KernelEventKind),
    seq=st.none() | st.integers(0, 10**6),
    timestamp=st.none() | _when,
    subject=st.none() | _text,
    count=st.integers(0, 100),
    lines=st.lists(_text, max_size=3),
)
_sel_entries = st.builds(
    SelEntry,
    record_id=st.integers(0, 2**16),
    timestamp=st.none() | _when,
    sensor_type=st.sampled_from(["Power Supply", "Power Unit", "Fan", "Memory", "Event Logging Disabled", "Other"]),
    sensor_name=_text,
    event=st.sampled_from(
        [
            "Failure detected",
            "Redundancy Lost",
            "Correctable ECC",
            "Uncorrectable ECC",
            "Log area reset/cleared",
            "Lower Critical going low",
            "",
        ]
    )
    | _text,
    direction=st.sampled_from([None, "asserted", "deasserted"]),
    component=st.none() | _text,
)
_disks = st.builds(
    DiskHealth,
    device=st.sampled_from(["/dev/sda", "/dev/sdb", "/dev/nvme0"]),
    protocol=st.sampled_from(["ATA", "NVMe", "SCSI", "unknown"]),
    serial=st.none() | st.sampled_from(["A", "B", "REDACTED"]),
    smart_passed=st.none() | st.booleans(),
    exit_flags=st.lists(st.sampled_from(["disk_failing", "command_failed"]), max_size=2),
    reallocated_sectors=st.none() | st.integers(0, 10**6),
    pending_sectors=st.none() | st.integers(0, 10**6),
    grown_defects=st.none() | st.integers(0, 10**6),
    nvme_critical_warning=st.none() | st.integers(0, 255),
    media_errors=st.none() | st.integers(0, 10**6),
    available_spare=st.none() | st.integers(0, 100),
    available_spare_threshold=st.none() | st.integers(0, 100),
)
_observations = st.builds(
    Observations,
    kernel_log=st.none()
    | st.builds(
        KernelLogState,
        source=st.just("kmsg"),
        boot_id=st.none() | st.sampled_from(["b1", "b2"]),
        last_seq=st.none() | st.integers(0, 10**6),
        events=st.lists(_events, max_size=5),
    ),
    sel=st.none()
    | st.builds(
        SelState,
        entries=st.lists(_sel_entries, max_size=5),
        entry_count=st.none() | st.integers(0, 5000),
        percent_used=st.none() | st.floats(0, 100),
        overflow=st.none() | st.booleans(),
        last_record_id=st.none() | st.integers(0, 2**16),
        cleared=st.booleans(),
    ),
    disks=st.none() | st.lists(_disks, max_size=4),
    edac=st.none() | st.builds(edac, st.none() | st.integers(0, 10**6)),
    identity=st.none()
    | st.builds(
        identity,
        kernel=st.none() | st.sampled_from(["2.6.23.17-amdpatch", "2.6.16.60-0.21-smp", "", "6.1.0"]),
        bios=st.none() | st.sampled_from(["2.9.4", "N/A", "P1.00", "2.10.2", "0x01"]),
        isolated=st.lists(st.integers(0, 40), max_size=6),
    ),
    interrupts=st.none()
    | st.builds(
        interrupts,
        st.integers(0, 8),
        st.dictionaries(st.sampled_from(["TLB", "LOC", "42", "7"]), st.lists(st.integers(0, 2**32), max_size=8)),
        st.dictionaries(st.sampled_from(["42", "7", "x"]), st.lists(st.integers(0, 40), max_size=6)),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.integers(-600, 3 * 86400), st.none() | st.sampled_from(["b1", "b2"]), _observations),
        min_size=1,
        max_size=4,
    )
)
def test_derive_never_raises_and_keeps_json_memory(steps: list[tuple[int, str | None, Observations]]) -> None:
    memory: dict[str, Any] = {}
    host = HostFacts("fuzz-1", "legacy-opteron-8356")
    for offset, boot, observations in steps:
        one = Report.model_validate(
            {
                "host": {"hostname": "fuzz-1", "boot_id": boot},
                "captured_at": T0 + dt.timedelta(seconds=offset),
                "observations": observations.model_dump(),
            }
        )
        result = derive(one, memory, host, baselines=BASELINES)
        assert json.loads(json.dumps(result.memory)) == result.memory
        assert all(isinstance(s.value, float | int) for s in result.signals)
        json.dumps([s.detail for s in result.signals])
        memory = result.memory


def test_derive_on_mutated_simulated_reports() -> None:
    fleet = SimulatedFleet(10, seed=5, fault_fraction=0.5)
    memories: dict[str, dict[str, Any]] = {}
    for minute in range(0, 30, 3):
        for one in fleet.reports(at(minute)):
            data = one.model_dump(mode="json")
            obs = data["observations"]
            if minute % 2:  # drop sections, shuffle counters and ids the way broken hosts do
                obs["interrupts"] = None
                for row in obs["sel"]["entries"]:
                    row["record_id"] = 0
            else:
                for d in obs["disks"]:
                    d["reallocated_sectors"] = None
                obs["identity"]["cpus"] = []
            mutated = Report.model_validate(data)
            host = HostFacts(one.host.hostname, "compute-skx-2s")
            result = derive(mutated, memories.get(host.hostname, {}), host, baselines=BASELINES)
            memories[host.hostname] = result.memory
    assert len(memories) == len([h for h in fleet.hosts if not h.down])
