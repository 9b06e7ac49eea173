"""cputime_exceeds_elapsed: what the central side makes of the agent's cputime watch (the contract with the
rollout comparison: subject `host`, value = processes flagged, a zero only for a complete scan)."""

from __future__ import annotations

import datetime as dt

from checker.schemas import CputimeExcess, CputimeWatch, HostIdentity, Identity, Observations, Report
from remediator.baselines import FirmwareBaselines
from remediator.derive import HostFacts, derive
from remediator.derive.cputime import cputime_signals

AT = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)
KERNEL = "2.6.23.17-amdpatch"


def job(pid: int, excess: float) -> CputimeExcess:
    return CputimeExcess(
        pid=pid,
        tid=pid,
        comm="cmsRun",
        threads=1,
        scope="thread",
        cputime_s=3600 + excess,
        elapsed_s=3600,
        excess_s=excess,
        stat_line=f"{pid} (cmsRun) R 1 ...",
    )


def watch(*found: CputimeExcess, complete: bool = True, unscanned: int = 0) -> CputimeWatch:
    return CputimeWatch(
        checked=180,
        flagged=len(found),
        processes=list(found),
        unscanned=unscanned,
        complete=complete,
        tolerance_s=3600,
        cpus=16,
        clk_tck=100,
        uptime_s=90000,
    )


def test_a_flagged_host_says_how_many_processes_on_which_kernel() -> None:
    jobs = [job(4000 + i, 21_474_836.47 - i) for i in range(7)]
    (signal,) = cputime_signals(watch(*jobs), Identity(kernel=KERNEL))
    assert (signal.kind, signal.subject, signal.value) == ("cputime_exceeds_elapsed", "host", 7.0)
    detail = signal.detail
    assert (detail["kernel"], detail["checked"], detail["complete"]) == (KERNEL, 180, True)
    assert [e["pid"] for e in detail["examples"]] == [4000, 4001, 4002, 4003, 4004]
    assert set(detail["examples"][0]) >= {"pid", "comm", "cputime_s", "elapsed_s", "excess_s"}
    assert detail["max_excess_s"] == 21_474_836.47


def test_a_complete_clean_scan_is_a_zero_and_an_incomplete_one_says_nothing() -> None:
    (clean,) = cputime_signals(watch(), Identity(kernel="6.1.0-28-amd64"))
    assert (clean.value, clean.detail["complete"], clean.detail["examples"], clean.detail["max_excess_s"]) == (
        0.0,
        True,
        [],
        0.0,
    )
    assert cputime_signals(watch(complete=False, unscanned=40), Identity(kernel="6.1.0-28-amd64")) == []
    # ... but what an incomplete scan found is still said, with complete false
    (partial,) = cputime_signals(watch(job(4000, 2e7), complete=False, unscanned=40), None)
    assert (partial.value, partial.detail["complete"], partial.detail["kernel"]) == (1.0, False, None)


def test_no_section_no_signal_and_derive_carries_it() -> None:
    assert cputime_signals(None, Identity(kernel=KERNEL)) == []
    report = Report(
        host=HostIdentity(hostname="opteron-01"),
        captured_at=AT,
        observations=Observations(identity=Identity(kernel=KERNEL), cputime=watch(job(4711, 2e7))),
    )
    derived = derive(report, {}, HostFacts("opteron-01"), baselines=FirmwareBaselines(version=1))
    found = [s for s in derived.signals if s.kind == "cputime_exceeds_elapsed"]
    assert [(s.subject, s.value, s.detail["kernel"]) for s in found] == [("host", 1.0, KERNEL)]


def test_a_report_whose_scan_only_aged_is_stored_as_the_same_state() -> None:
    from remediator.ingest import report_digest

    def at(uptime: float, excess: float) -> Report:
        moved = {"rotation_ahead": int(uptime) % 13, "rotation_checked": int(uptime) % 7, "caps_hit": ["processes"]}
        if uptime > 90000:
            moved = {"rotation_cycles": 12, "rechecked": 1}
        seen = watch(job(4711, excess)).model_copy(
            update={"uptime_s": uptime, "bytes_read": int(uptime) % 977, **moved}
        )
        return Report(host=HostIdentity(hostname="opteron-01"), captured_at=AT, observations=Observations(cputime=seen))

    assert report_digest(at(90000, 2e7)) == report_digest(at(90060, 2e7 + 60))
    assert report_digest(at(90000, 2e7)) != report_digest(
        Report(host=HostIdentity(hostname="opteron-01"), captured_at=AT)
    )
