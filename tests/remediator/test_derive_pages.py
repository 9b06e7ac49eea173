"""Corrected errors per 4 KiB page (remediator/derive/pages.py): the pages of real EDAC and machine-check
records, a 24 h window by the records' own times, each row counted once, and the bounds."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from bench.samples import sample
from checker.parsers.mce import parse_ras_mc_ctl_errors
from checker.parsers.rasdaemon import parse_mc_event_rows
from checker.schemas import MceRecord, RasdaemonState, RasMemoryEvent
from remediator.derive.memory import MAX_PAGES
from tests.builders.observations import T0, Deriver, Watch, by_subject, clean_fleet, host_for, of, report

# The EDAC line the kernel prints is the mc_event trace event rasdaemon stores: the same page, offset and
# grain (edac_raw_mc_handle_error; rasdaemon keeps the trace's grain_bits in its `grain` column).
_EDAC_LINE = re.compile(
    r"EDAC MC(?P<mc>\d+): (?P<count>\d+) (?P<type>CE|UE) .*? on (?P<label>\S+) \(.*?page:(?P<page>0x[0-9a-f]+) "
    r"offset:(?P<offset>0x[0-9a-f]+) grain:(?P<grain>\d+)"
)
SANDY = "kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log"
SANDY_AT = dt.datetime(2020, 1, 27, 19, 27, 15, tzinfo=dt.UTC)  # the sample's ctime stamps (a UTC host assumed)
ZEN2 = "rasdaemon/ras-mc-ctl-errors-amd-zen2-umc-dram-ecc-repeated.txt"
ZEN2_AT = dt.datetime(2026, 8, 24, 3, 0, tzinfo=dt.UTC)  # an hour after its last event


def mc_event_rows(text: str, stamp: str, first_id: int = 1) -> list[dict[str, Any]]:
    """mc_event rows (rasdaemon's columns) of a kernel log's EDAC lines."""
    rows = []
    for number, m in enumerate(_EDAC_LINE.finditer(text), start=first_id):
        grain = int(m["grain"])
        rows.append(
            {
                "id": number,
                "timestamp": stamp,
                "err_count": int(m["count"]),
                "err_type": "Corrected" if m["type"] == "CE" else "Uncorrected",
                "err_msg": "memory read error",
                "label": m["label"],
                "mc": int(m["mc"]),
                "top_layer": 2,
                "middle_layer": 0,
                "lower_layer": -1,
                "address": int(m["page"], 16) << 12 | int(m["offset"], 16),
                "grain": (grain - 1).bit_length() if grain > 1 else 0,  # the kernel's fls_long(grain - 1)
            }
        )
    return rows


def events(rows: list[dict[str, Any]]) -> list[RasMemoryEvent]:
    parsed = parse_mc_event_rows(rows)
    assert parsed.problems == []
    return parsed.value


def ras(memory: list[RasMemoryEvent] | None = None, mce: list[MceRecord] | None = None) -> RasdaemonState:
    memory = memory or []
    ids = {"mc_event": max((e.id for e in memory), default=0)}
    if mce is not None:
        ids["mce_record"] = max((r.id or 0 for r in mce), default=0)
    return RasdaemonState(memory_events=memory, last_id=ids["mc_event"], last_ids=ids, mce_records=mce)


def sandy() -> list[RasMemoryEvent]:
    return events(mc_event_rows(sample(SANDY), "2020-01-27 19:27:15 +0000"))


def test_the_real_sandy_bridge_errors_land_on_one_page_of_their_dimm() -> None:
    run = Deriver()
    signals = run(report(SANDY_AT + dt.timedelta(minutes=5), rasdaemon=ras(sandy())))
    (page,) = of(signals, "page_ce_count")
    assert (page.subject, page.value) == ("0x849923000", 1.0)  # page:0x849923 offset:0x380
    assert page.detail["address"] == "0x849923380"
    assert page.detail["dimm"] == "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
    assert (page.detail["mc"], page.detail["label"]) == (0, "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0")
    assert page.detail["grain_bits"] == 5  # grain:32 bytes: well inside the page
    assert page.detail["page_certain"] is True
    assert page.detail["uncertain"] is None
    assert page.detail["concentrated"] is True
    assert page.detail["sources"] == "rasdaemon mc_event"
    # the same rows in the next report are not counted again
    assert of(run(report(SANDY_AT + dt.timedelta(minutes=6), rasdaemon=ras(sandy()))), "page_ce_count") == []


def test_the_real_zen2_sticky_cell_is_one_page_but_its_umc_address_is_not_physical() -> None:
    records = parse_ras_mc_ctl_errors(sample(ZEN2)).value.mce
    assert len(records) == 3
    run = Deriver()
    signals = run(report(ZEN2_AT, mce=records))
    (page,) = of(signals, "page_ce_count")
    assert (page.subject, page.value) == ("0x27aad2000", 3.0)
    assert page.detail["dimm"] == "cpu2 bank17 channel0"
    assert page.detail["page_certain"] is False
    assert "normalised address" in page.detail["uncertain"]
    assert page.detail["sources"] == "mcelog"
    # mcelog's records carry no id: sent again (an agent killed before it moved its cursor), they are known by time
    assert of(run(report(ZEN2_AT + dt.timedelta(minutes=1), mce=records)), "page_ce_count") == []


ICELAKE = "rasdaemon/ras-mc-ctl-errors-icelake-mce-memctrl-sddc-wrapped.txt"
ICELAKE_AT = dt.datetime(2023, 5, 31, 15, 0, tzinfo=dt.UTC)


def icelake_record() -> MceRecord:
    """Event 112 of the Ice Lake sample (ADDRV and MISCV set; misc=0xd03451de4819486: LSB 6, mode 2)."""
    record = parse_ras_mc_ctl_errors(sample(ICELAKE)).value.mce[0]
    assert (record.status, record.misc) == ("0x8c00004200800090", "0xd03451de4819486")
    return record.model_copy(update={"id": 112})


def page_certain(record: MceRecord) -> object:
    (page,) = of(Deriver()(report(ICELAKE_AT, rasdaemon=ras(mce=[record]))), "page_ce_count")
    return page.detail["page_certain"]


def test_an_intel_memory_controller_address_is_physical() -> None:
    record = icelake_record()
    signals = Deriver()(report(ICELAKE_AT, rasdaemon=ras(mce=[record])))
    (page,) = of(signals, "page_ce_count")
    assert (page.subject, page.detail["page_certain"]) == ("0x1efa4c7c000", True)
    assert (page.detail["socket"], page.detail["location"]) == (1, "channel 0")
    no_addrv = record.model_copy(update={"status": "0x8800004200800090", "id": 113})  # ADDRV clear
    assert of(Deriver()(report(ICELAKE_AT, rasdaemon=ras(mce=[no_addrv]))), "page_ce_count") == []


def test_a_machine_check_address_is_certain_only_as_mci_misc_says() -> None:
    """The kernel's mce_usable_address(): MISCV set, the address's LSB at most 12, physical mode (2).
    Failed on the code before the review (every ADDRV address was taken as the page's)."""
    record = icelake_record()
    assert page_certain(record) is True
    assert page_certain(record.model_copy(update={"status": "0x8400004200800090"})) is False  # MISCV clear
    assert page_certain(record.model_copy(update={"misc": None})) is False  # the source gave no MISC
    lsb_13 = f"0x{0xD03451DE4819486 & ~0x3F | 13:x}"
    assert page_certain(record.model_copy(update={"misc": lsb_13})) is False  # an 8 KiB granule
    mode_1 = f"0x{0xD03451DE4819486 & ~0x1C0 | 1 << 6:x}"
    assert page_certain(record.model_copy(update={"misc": mode_1})) is False  # a linear address
    lsb_12 = f"0x{0xD03451DE4819486 & ~0x3F | 12:x}"
    assert page_certain(record.model_copy(update={"misc": lsb_12})) is True


def test_an_amd_record_is_uncertain_by_its_vendor_not_its_words() -> None:
    """An AMD SMCA UMC record whose text names no bank (an mcelog line, a rasdaemon built without bank names):
    the CPU vendor decides. Failed on the code before the review (only the words "umc" were looked for)."""
    record = icelake_record().model_copy(update={"message": "Corrected error, no action required.", "amd": True})
    assert page_certain(record) is False
    assert page_certain(record.model_copy(update={"amd": False})) is True


def test_a_rasdaemon_mce_record_row_carries_misc_and_vendor() -> None:
    from checker.parsers.rasdaemon import parse_mce_record_rows

    rows = [{"id": 1, "status": 0x8C00004200800090, "addr": 0x1EFA4C7CC40, "misc": 0x0D03451DE4819486, "cpuvendor": 2}]
    (record,) = parse_mce_record_rows(rows).value
    assert (record.misc, record.amd) == ("0xd03451de4819486", True)


def row(
    row_id: int, stamp: str, address: int = 0x849923380, *, err_type: str = "Corrected", grain: int = 5
) -> dict[str, Any]:
    return {
        "id": row_id,
        "timestamp": stamp,
        "err_count": 1,
        "err_type": err_type,
        "label": "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
        "mc": 0,
        "top_layer": 2,
        "middle_layer": 0,
        "lower_layer": -1,
        "address": address,
        "grain": grain,
    }


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S +0000")


def test_the_window_is_24_hours_of_the_records_own_times() -> None:
    now = SANDY_AT
    rows = [row(i, stamp(now - dt.timedelta(hours=30 - i))) for i in range(1, 11)]  # 30 h ago .. 21 h ago
    run = Deriver()
    (page,) = of(run(report(now, rasdaemon=ras(events(rows)))), "page_ce_count")
    assert page.value == 4  # the four within the last 24 h (first sight counts them by their times)
    later = now + dt.timedelta(hours=2, minutes=30)
    (page,) = of(run(report(later, rasdaemon=ras(events([row(11, stamp(later))])))), "page_ce_count")
    assert (page.value, page.detail["new"]) == (3, 1)  # 21 h and 22 h ago aged out, plus the new one


def test_rasdaemon_and_the_machine_check_path_are_the_same_errors_not_twice_as_many() -> None:
    """The sample logs one error twice: sb_edac's machine check (Bank 5, ADDR 849923380) and EDAC's line."""
    mce = MceRecord(
        timestamp=SANDY_AT,
        cpu=0,
        socket=0,
        bank=5,
        status="0x8c00004000010092",
        address="0x849923380",
        error_class="memory",
        corrected=True,
        message="HANDLING MCE MEMORY ERROR",
        id=1,
    )
    signals = Deriver()(report(SANDY_AT + dt.timedelta(minutes=1), rasdaemon=ras(sandy(), [mce])))
    (page,) = of(signals, "page_ce_count")
    assert page.value == 1
    assert page.detail["dimm"] == "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"  # EDAC's DIMM over the channel
    assert page.detail["sources"] == "rasdaemon mc_event, rasdaemon mce_record"


def test_uncorrected_errors_are_not_counted_the_kernel_offlines_those_pages() -> None:
    rows = [row(1, stamp(SANDY_AT), err_type="Uncorrected"), row(2, stamp(SANDY_AT), err_type="Fatal")]
    assert of(Deriver()(report(SANDY_AT, rasdaemon=ras(events(rows)))), "page_ce_count") == []


def test_a_grain_wider_than_a_page_makes_the_page_uncertain() -> None:
    (page,) = of(
        Deriver()(report(SANDY_AT, rasdaemon=ras(events([row(1, stamp(SANDY_AT), grain=14)])))), "page_ce_count"
    )
    assert page.detail["page_certain"] is False
    assert page.detail["uncertain"] == "the error's grain is 2^14 bytes, more than a 4 KiB page"


def test_errors_spread_over_many_pages_are_bounded_and_not_concentrated() -> None:
    count = MAX_PAGES + 36
    rows = [row(i, stamp(SANDY_AT), address=0x100000000 + i * 0x1000) for i in range(1, count + 1)]
    run = Deriver()
    signals = run(report(SANDY_AT, rasdaemon=ras(events(rows))))
    pages = by_subject(signals, "page_ce_count")
    assert len(pages) == MAX_PAGES
    assert len(run.memory["pages"]["pages"]) == MAX_PAGES
    one = next(iter(pages.values()))
    assert one.detail["concentrated"] is False
    assert one.detail["location_pages"] == MAX_PAGES
    assert one.detail["evicted_24h"] == 36
    assert len(json.dumps(run.memory["pages"])) < 6_000


def test_evicted_pages_keep_any_page_from_being_called_concentrated() -> None:
    """An eviction takes its page's errors out of the DIMM's sum: failed on the code before the review (the page
    with 41 of the 72 tracked errors was concentrated, though 8 more pages' errors had been dropped)."""
    first = SANDY_AT - dt.timedelta(hours=2)
    spread = [row(i, stamp(first), address=0x100000000 + i * 0x1000) for i in range(1, 41)]
    run = Deriver()
    run(report(first, rasdaemon=ras(events(spread))))
    assert sum(n for _, n in run.memory["pages"]["evicted"]) == 8
    tracked = next(iter(run.memory["pages"]["pages"]))
    burst = [row(100 + i, stamp(SANDY_AT), address=int(tracked, 16)) for i in range(40)]
    (page,) = of(run(report(SANDY_AT, rasdaemon=ras(events(burst)))), "page_ce_count")
    assert (page.value, page.detail["location_ces_24h"], page.detail["evicted_24h"]) == (41, 72, 8)
    assert page.detail["concentrated"] is False


def test_the_simulated_weak_cell_stops_erring_once_its_page_is_offlined_until_a_reboot() -> None:
    fleet = clean_fleet()
    host = host_for(fleet, "dimm_ce_page")
    watch = Watch(host)
    host.inject(fleet.fault("dimm_ce_page", 1))
    page = host.faults[0].variant

    def page_counts(minutes: range) -> list[float]:
        found: list[float] = []
        for minute in minutes:
            found += [s.value for s in of(watch(host.report(T0 + dt.timedelta(minutes=minute))), "page_ce_count")]
        return found

    counts = page_counts(range(0, 120, 10))
    assert counts[0] == 7  # the six rasdaemon kept from before, by the rows' own times, and the first now
    assert max(counts) >= 10
    assert host.apply("soft_offline_page", {"address": page})["changed"]["offlined"] is True
    after = page_counts(range(120, 240, 10))  # nothing but the patrol scrubber reads the page any more
    assert 1 <= len(after) <= 3  # its hits, about hourly (the pure deriver counts them with the day before)
    host.reboot(T0 + dt.timedelta(minutes=240))
    assert page_counts(range(250, 400, 10))  # the page is back in use, and so are its errors


def test_mcelog_records_carry_their_misc_and_vendor() -> None:
    """The Skylake-SP sample's `MISC 229aa040900086 ADDR fffc4b00` line and its `CPUID Vendor Intel`."""
    from checker.parsers.mce import parse_mcelog

    (record,) = parse_mcelog(sample("mcelog/mcelog-skylake-sp-uncorrected-l2-architectural-only.txt")).value
    assert (record.misc, record.address, record.amd) == ("0x229aa040900086", "0xfffc4b00", False)
