"""The BMC log's correctable-ECC entries of a DIMM as a rate by their own times (remediator/derive/sel_memory.py):
the review of the Redfish rules, finding 7."""

from __future__ import annotations

import datetime as dt

from checker.schemas import SelEntry
from remediator.derive.sel_memory import CE_FLOOR, CE_WINDOW_S, ce_rate_signals
from tests.builders.observations import Deriver, at, of, report, sel_entry, sel_state

NOW = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def ce(n: int, when: dt.datetime, event: str = "Correctable ECC", service: str | None = None) -> SelEntry:
    entry = sel_entry(n, "Memory", event, component="DIMM_A1", when=when)
    return entry.model_copy(update={"log_service": service})


def test_ten_entries_a_day_is_a_trickle_not_a_ticket() -> None:
    """The old rule's ten a day: one entry per error is 10 CEs a day, ~400 times below 0.05 CE/s."""
    entries = [ce(n, NOW - dt.timedelta(hours=2 * n)) for n in range(10)]
    (rate,) = ce_rate_signals({"DIMM_A1": entries}, {}, NOW)[0]
    assert rate.value < CE_FLOOR
    assert rate.detail["entries"] <= 1


def test_a_steady_stream_is_held_after_thirty_minutes_by_its_own_times() -> None:
    stream = [ce(n, NOW - dt.timedelta(seconds=10 * n)) for n in range(240)]  # 0.1/s for 40 minutes
    (rate,) = ce_rate_signals({"DIMM_A1": stream}, {}, NOW)[0]
    assert rate.value >= CE_FLOOR
    assert rate.detail["held"] is True
    # the same pace for 20 minutes only: fast enough, not yet held
    (brief,) = ce_rate_signals({"DIMM_A1": stream[:120]}, {}, NOW)[0]
    assert brief.detail["held"] is False
    # read over several reports: the kept buckets carry the stream on
    first, kept = ce_rate_signals({"DIMM_A1": stream[120:]}, {}, NOW - dt.timedelta(minutes=20))
    assert first[0].detail["held"] is False
    (later,) = ce_rate_signals({"DIMM_A1": stream[:120]}, kept, NOW)[0]
    assert (later.detail["held"], later.value >= CE_FLOOR) == (True, True)


def test_the_same_event_in_two_log_services_counts_once() -> None:
    """Dell serves one memory event in its Sel and its Lclog: the same time and message from another
    service is a duplicate; several entries of one service in one second are not."""
    times = [NOW - dt.timedelta(seconds=20 * n) for n in range(120)]  # 0.05/s for 40 minutes
    sel = [ce(n, t, service="Sel") for n, t in enumerate(times)]
    lclog = [ce(1000 + n, t, service="Lclog") for n, t in enumerate(times)]
    (both,) = ce_rate_signals({"DIMM_A1": sel + lclog}, {}, NOW)[0]
    (alone,) = ce_rate_signals({"DIMM_A1": sel}, {}, NOW)[0]
    assert both.value == alone.value
    assert both.detail["duplicates"] == 120
    same_second = [ce(n, NOW, service="Log1") for n in range(3)]
    (burst,) = ce_rate_signals({"DIMM_A1": same_second}, {}, NOW)[0]
    assert (burst.detail["entries"], burst.detail["duplicates"]) == (3, 0)


def test_logging_limit_reached_is_at_least_the_floor() -> None:
    limit = ce(2, NOW, "Correctable ECC logging limit reached")
    (rate,) = ce_rate_signals({"DIMM_A1": [ce(1, NOW - dt.timedelta(minutes=1)), limit]}, {}, NOW)[0]
    assert (rate.detail["at_least"], rate.detail["held"], rate.value) == (True, True, CE_FLOOR)
    dell = ce(3, NOW, "Correctable memory error logging disabled for a memory device at location DIMM_A1.")
    assert ce_rate_signals({"DIMM_A1": [dell]}, {}, NOW)[0][0].detail["at_least"] is True


def test_through_derive_uncorrectable_entries_are_not_rated_and_edac_silence_is_said() -> None:
    run = Deriver()
    run(report(at(0), sel=sel_state(count=0)))
    ue = sel_entry(1, "Memory", "Uncorrectable ECC", component="DIMM_A1", when=at(1))
    assert of(run(report(at(1), sel=sel_state(ue, count=1))), "sel_memory_ce_rate") == []
    stream = [
        sel_entry(10 + n, "Memory", "Correctable ECC", component="DIMM_A1", when=at(2) - dt.timedelta(seconds=10 * n))
        for n in range(200)
    ]
    (rate,) = of(run(report(at(2), sel=sel_state(*stream, count=201))), "sel_memory_ce_rate")
    assert (rate.subject, rate.detail["held"], rate.detail["edac_silent"]) == ("DIMM_A1", True, True)
    assert rate.detail["window_s"] == CE_WINDOW_S
