"""Redfish log reads that used to lose entries silently (review r5 findings 2 and 3, scratch tests of
/tmp/r5-rfcode turned into ours): a burst of new entries larger than `max_entries` is counted as truncated
in both listing orders, an oldest-first log without Members@odata.count is read again after its first cycle,
and an oldest-first log whose paging offers no $skip and whose end is beyond `max_pages` is a problem, not
its oldest history reported as new."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from checker.collectors.context import CollectorState
from checker.collectors.redfish import KEYS_UNORDERED
from tests.checker.redfish_server import RedfishService, collection, skeleton
from tests.checker.test_redfish_collector import SMC_LOG, collector_for, cycle, generated


def stamps(n: int) -> list[str]:
    return [f"2024-01-01T{m // 3600:02d}:{(m // 60) % 60:02d}:{m % 60:02d}Z" for m in range(n)]


def members(n: int) -> list[dict[str, Any]]:
    return generated([str(i) for i in range(1, n + 1)], stamps(n))


def test_a_burst_beyond_max_entries_oldest_first_is_walked_over_several_cycles(
    service: RedfishService, password_file: Path
) -> None:
    """Issue 19 item 2: 180 new entries, 40 a cycle: each cycle reports the oldest unread 40, from the last one
    reported ($skip, listed again and filtered), until the log is caught up; nothing is lost, nothing truncated."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(300)
    service.paged[SMC_LOG] = (log[:120], 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log, 50)  # 180 new entries between two cycles
    got: list[str] = []
    for _ in range(5):
        report = cycle(collector, state)
        sel = report.observations.sel
        assert sel is not None
        assert sel.truncated == 0
        assert sel.source == "redfish"  # its record ids are the collector's own (review r5 finding 12)
        got += [e.entry_id or "" for e in sel.entries]
    assert got == [str(i) for i in range(121, 301)]
    assert f"{SMC_LOG}?$skip=119" in service.gets(SMC_LOG)  # at the last one reported (review r2 finding 2)
    again = cycle(collector, state).observations.sel
    assert again is not None
    assert (again.entries, again.truncated) == ([], 0)  # caught up: nothing twice


def test_a_burst_beyond_max_entries_newest_first_is_walked_over_several_cycles(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(300)[::-1]
    service.paged[SMC_LOG] = (log[180:], 50)  # 120..1
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log, 50)  # 300..1
    got: list[str] = []
    for n in range(5):
        sel = cycle(collector, state).observations.sel
        assert sel is not None
        assert sel.truncated == 0
        got += [e.entry_id or "" for e in sel.entries]
        if n == 0:
            assert got == [str(i) for i in range(121, 161)]  # the oldest unread, not the newest
    assert got == [str(i) for i in range(121, 301)]
    again = cycle(collector, state).observations.sel
    assert again is not None
    assert (again.entries, again.truncated) == ([], 0)


def test_only_entries_the_bmc_overwrote_are_counted_lost(service: RedfishService, password_file: Path) -> None:
    """A full log of 100 that wraps: the BMC drops its oldest as new ones arrive. 1..100 read (first read keeps
    the newest 40: 61..100); then 150 more arrive, the log now holds 151..250 (oldest first): 101..150 were
    overwritten before anyone read them, and only they are counted."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(250)
    service.paged[SMC_LOG] = (log[:100], 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log[150:], 50)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert ([e.entry_id for e in sel.entries], sel.truncated) == ([str(i) for i in range(151, 191)], 50)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert ([e.entry_id for e in sel.entries], sel.truncated) == ([str(i) for i in range(191, 231)], 0)


def test_a_small_increment_is_not_counted_as_truncated(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(130)
    service.paged[SMC_LOG] = (log[:120], 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log, 50)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert ([e.entry_id for e in sel.entries], sel.truncated) == ([str(i) for i in range(121, 131)], 0)


def test_an_oldest_first_log_without_a_count_is_read_again(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(10)
    service.add({"@odata.id": SMC_LOG, "Members": log[:5]})  # no Members@odata.count
    collector, state = collector_for(service, password_file), CollectorState()
    first = cycle(collector, state).observations.sel
    assert first is not None
    assert [e.entry_id for e in first.entries] == ["1", "2", "3", "4", "5"]
    service.add({"@odata.id": SMC_LOG, "Members": log})
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == ["6", "7", "8", "9", "10"]
    service.add({"@odata.id": SMC_LOG, "Members": log})
    unchanged = cycle(collector, state).observations.sel
    assert unchanged is not None
    assert unchanged.entries == []  # read again, nothing new: none reported twice


def token_pages(log: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """An oldest-first log paged with $skiptoken (as some BMCs do), no $skip: each page its own resource."""
    pages = []
    for n in range(0, len(log), size):
        path = SMC_LOG if n == 0 else f"{SMC_LOG}?$skiptoken=t{n}"
        body = collection(path, [], Members=log[n : n + size], **{"Members@odata.count": len(log)})
        if n + size < len(log):
            body["Members@odata.nextLink"] = f"{SMC_LOG}?$skiptoken=t{n + size}"
        pages.append(body)
    return pages


def test_an_oldest_first_log_beyond_max_pages_without_skip_is_a_problem(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(*token_pages(members(100), 10))
    report = cycle(collector_for(service, password_file, max_pages=3), CollectorState())
    sel = report.observations.sel
    assert sel is not None
    assert sel.entries == []  # not 1..30, the oldest history, as if new
    problems = report.collectors["redfish"].problems
    assert any("newest entries were not reached" in p for p in problems), problems


def test_an_oldest_first_log_within_max_pages_without_skip_is_read(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(*token_pages(members(30), 10))
    report = cycle(collector_for(service, password_file, max_pages=3, max_entries=50), CollectorState())
    sel = report.observations.sel
    assert sel is not None
    assert [e.entry_id for e in sel.entries] == [str(i) for i in range(1, 31)]
    assert not any("not reached" in p for p in report.collectors["redfish"].problems)


def test_a_clear_and_a_refill_past_the_old_count_is_a_clear(service: RedfishService, password_file: Path) -> None:
    """Review r5 finding 4: Ids 1-10 read; the log is cleared and refills to 15 while the agent is away. The
    count grew and the newest Id went up, but Id 10 now has another Created time: cleared, all 15 new."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(collection(SMC_LOG, [], Members=members(10), **{"Members@odata.count": 10}))
    collector, state = collector_for(service, password_file), CollectorState()
    cycle(collector, state)
    later = generated([str(i) for i in range(1, 16)], [f"2024-02-01T00:00:{i:02d}Z" for i in range(15)])
    service.add(collection(SMC_LOG, [], Members=later, **{"Members@odata.count": 15}))
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert sel.cleared
    assert [e.entry_id for e in sel.entries] == [str(i) for i in range(1, 16)]
    grown = later + generated(["16"], ["2024-02-01T00:01:00Z"])
    service.add(collection(SMC_LOG, [], Members=grown, **{"Members@odata.count": 16}))
    after = cycle(collector, state).observations.sel
    assert after is not None
    assert (after.cleared, [e.entry_id for e in after.entries]) == (False, ["16"])  # growth alone is no clear


def test_a_trickling_answer_is_cut_at_the_timeout(service: RedfishService, password_file: Path) -> None:
    """Review r5 finding 5: requests' timeout bounds each socket read, so a BMC sending a byte every 0.2 s
    kept a GET with a 1 s timeout for the whole body. Now the body is read against the wall clock."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(collection(SMC_LOG, [], Members=members(3), **{"Members@odata.count": 3}))
    service.trickle = {SMC_LOG}  # ~1.5 KiB: five minutes at this pace
    collector = collector_for(service, password_file, timeout_s=1.0)
    started = time.monotonic()
    report = cycle(collector, CollectorState())
    assert time.monotonic() - started < 5
    problems = report.collectors["redfish"].problems
    assert any("still arriving at the timeout" in p for p in problems), problems


def test_a_dripping_status_line_and_headers_are_cut_at_the_timeout(
    service: RedfishService, password_file: Path
) -> None:
    """Issue 19 item 3: the status line and headers were bounded per socket read only, so a BMC sending them a
    byte every 0.2 s (each read well within the timeout) held the GET for minutes. One deadline now bounds the
    whole answer."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(collection(SMC_LOG, [], Members=members(3), **{"Members@odata.count": 3}))
    service.drip = {SMC_LOG}  # ~470 bytes of headers: 90 s at this pace
    collector = collector_for(service, password_file, timeout_s=1.0)
    started = time.monotonic()
    report = cycle(collector, CollectorState())
    assert time.monotonic() - started < 5
    problems = report.collectors["redfish"].problems
    assert any("by the timeout" in p or "still arriving" in p for p in problems), problems


def test_an_answer_past_the_size_cap_is_refused(service: RedfishService, password_file: Path) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(collection(SMC_LOG, [], Members=members(3), **{"Members@odata.count": 3}))
    service.resources[SMC_LOG] = b'{"Members": [], "pad": "' + b"x" * (9 << 20) + b'"}'
    report = cycle(collector_for(service, password_file), CollectorState())
    problems = report.collectors["redfish"].problems
    assert any("larger than 8388608 bytes" in p for p in problems), problems
    assert report.collectors["redfish"].status != "unavailable"  # that resource only: the cycle went on


def test_a_refused_password_is_not_tried_again_until_its_file_changes(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    """Review r5 finding 16: a wrong password was tried every cycle; BMCs lock accounts or block addresses
    after a few failed logins."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    collector, state = collector_for(service, wrong), CollectorState()
    assert cycle(collector, state).collectors["redfish"].status == "unavailable"
    logins = sum(1 for r in service.requests if r.method == "POST")
    again = cycle(collector, state).collectors["redfish"]
    assert again.status == "unavailable"
    assert "not tried again until the password file changes" in (again.reason or "")
    assert sum(1 for r in service.requests if r.method == "POST") == logins  # no new login attempt
    wrong.write_text(password_file.read_text())
    os.utime(wrong, (time.time() + 5, time.time() + 5))  # a new mtime, even within the clock's resolution
    assert cycle(collector, state).collectors["redfish"].status == "ok"


def unclocked(ids_and_messages: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Entries with non-numeric Ids and no Created (a BMC whose clock was never set lists them so)."""
    return [
        {"@odata.id": f"{SMC_LOG}/{i}", "Id": i, "EntryType": "Event", "Severity": "Warning", "Message": message}
        for i, message in ids_and_messages
    ]


def test_entries_without_a_clock_or_numeric_id_are_told_apart_by_id_and_content(
    service: RedfishService, password_file: Path
) -> None:
    """Issue 19 item 5: the same entry listed twice is one entry, reported once and not again next cycle; two
    different entries under one Id are two."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    fan, psu = ("evt", "Fan 3 below lower critical"), ("evt", "PSU 2 input lost")
    service.add({"@odata.id": SMC_LOG, "Members": unclocked([fan, psu, fan])})  # no count: listed every cycle
    collector, state = collector_for(service, password_file), CollectorState()
    first = cycle(collector, state).observations.sel
    assert first is not None
    assert sorted(e.event for e in first.entries) == sorted([fan[1], psu[1]])
    again = cycle(collector, state).observations.sel
    assert again is not None
    assert again.entries == []  # not reported a second time
    disk = ("evt", "Drive 4 predictive failure")
    service.add({"@odata.id": SMC_LOG, "Members": unclocked([fan, psu, fan, disk])})
    later = cycle(collector, state).observations.sel
    assert later is not None
    assert [e.event for e in later.entries] == [disk[1]]  # same Id, other content: new


EPOCH_IDS = [1_700_000_000 + 3600 * i for i in range(700)]  # bmcweb's EventLog: Ids are epoch seconds


def epoch_log(lo: int, hi: int) -> list[dict[str, Any]]:
    return generated([str(EPOCH_IDS[i]) for i in range(lo, hi)], stamps(hi)[lo:hi])


def test_a_full_rotating_log_whose_ids_have_gaps_reports_only_the_new(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 finding 1: an OpenBMC EventLog (Ids are epoch seconds, oldest first) full at 600, pages of 50;
    5 entries arrive a cycle and the 5 oldest go. The first Id moving by 18000 is not 18000 entries dropped:
    each cycle reports exactly its 5 new entries, nothing lost, no clear, no history as new."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.paged[SMC_LOG] = (epoch_log(0, 600), 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    for n in range(1, 4):
        service.paged[SMC_LOG] = (epoch_log(5 * n, 600 + 5 * n), 50)
        report = cycle(collector, state)
        sel = report.observations.sel
        assert sel is not None
        got = [EPOCH_IDS.index(int(e.entry_id or 0)) for e in sel.entries]
        assert (got, sel.truncated, sel.cleared) == (list(range(595 + 5 * n, 600 + 5 * n)), 0, False)
        assert not any("not reached" in p for p in report.collectors["redfish"].problems)


def test_a_page_that_fails_is_not_a_clear(service: RedfishService, password_file: Path) -> None:
    """Review r2 finding 1: the $skip page past the cursor fails once: only older history was listed, which is
    neither a clear nor new; the next cycle reads on from the cursor."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(130)
    service.paged[SMC_LOG] = (log[:120], 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log, 50)
    broken = {f"{SMC_LOG}?$skip={n}": b"{not json" for n in (119, 120)}  # (120: where e8c1a3c entered)
    service.resources.update(broken)
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert (sel.entries, sel.cleared, sel.truncated) == ([], False, 0)
    for path in broken:
        del service.resources[path]
    sel = cycle(collector, state).observations.sel
    assert sel is not None
    assert ([e.entry_id for e in sel.entries], sel.cleared, sel.truncated) == (
        [str(i) for i in range(121, 131)],
        False,
        0,
    )


def test_a_clear_and_a_refill_past_the_old_count_is_a_clear_on_a_paged_log(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 finding 2: 120 entries read ($skip pages of 50); the log is cleared and refilled to 130 with
    new Created times. The walk lists the last entry reported again (Id 120, now with another Created time):
    a clear, and the refilled log is walked from its first entry."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.paged[SMC_LOG] = (members(120), 50)
    collector, state = collector_for(service, password_file, max_entries=40), CollectorState()
    cycle(collector, state)
    later = generated([str(i) for i in range(1, 131)], [s.replace("2024-01-01", "2024-02-01") for s in stamps(130)])
    service.paged[SMC_LOG] = (later, 50)
    got: list[str] = []
    for n in range(4):
        sel = cycle(collector, state).observations.sel
        assert sel is not None
        assert (sel.cleared, sel.truncated) == (n == 0, 0)
        got += [e.entry_id or "" for e in sel.entries]
    assert got == [str(i) for i in range(1, 131)]


def test_a_newest_first_backlog_in_small_pages_is_walked_without_losing_any(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 finding 3: 1000 new entries, newest first, pages of 20, 200 a cycle, 10 pages: the jump enters
    only as far back as the pages left can read to the cursor, and the newest page waits for its turn. Every
    entry is reported once, oldest first, and none counted lost."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    log = members(1300)[::-1]
    service.paged[SMC_LOG] = (log[1000:], 20)  # 300..1
    collector, state = collector_for(service, password_file, max_entries=200), CollectorState()
    cycle(collector, state)
    service.paged[SMC_LOG] = (log, 20)  # 1300..1: 1000 new
    got: list[int] = []
    for _ in range(8):
        sel = cycle(collector, state).observations.sel
        assert sel is not None
        assert sel.truncated == 0
        got += [int(e.entry_id or 0) for e in sel.entries]
    assert got == list(range(301, 1301))


def test_an_unclocked_entry_the_bmc_marks_resolved_is_not_new_again(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 note 11: the content hash leaves out what a BMC changes on a listed entry (HPE's IML counts an
    event's repeats and marks it repaired; the standard Resolved and Modified are not in `raw` at all)."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    [fan] = unclocked([("evt", "Fan 3 below lower critical")])
    service.add({"@odata.id": SMC_LOG, "Members": [{**fan, "Oem": {"Hpe": {"Count": 1, "Repaired": False}}}]})
    collector, state = collector_for(service, password_file), CollectorState()
    first = cycle(collector, state).observations.sel
    assert first is not None
    assert len(first.entries) == 1
    repeated = {**fan, "Oem": {"Hpe": {"Count": 3, "Repaired": True}}, "Resolved": True, "Modified": "2024-01-02"}
    service.add({"@odata.id": SMC_LOG, "Members": [repeated]})
    again = cycle(collector, state).observations.sel
    assert again is not None
    assert again.entries == []


def test_more_unclocked_entries_than_remembered_are_a_problem_not_reported_every_cycle(
    service: RedfishService, password_file: Path
) -> None:
    """Review r2 note 11: past KEYS_UNORDERED such entries, the overflow used to be reported again each cycle."""
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    many = unclocked([(f"e{n}", f"event {n}") for n in range(KEYS_UNORDERED + 40)])
    service.add({"@odata.id": SMC_LOG, "Members": many})  # no count: listed every cycle
    collector, state = collector_for(service, password_file, max_entries=50), CollectorState()
    cycle(collector, state)
    for _ in range(2):
        report = cycle(collector, state)
        sel = report.observations.sel
        assert sel is not None
        assert sel.entries == []
        assert any("more than the 512 remembered" in p for p in report.collectors["redfish"].problems)
