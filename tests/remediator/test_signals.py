"""Counter deltas become rates safely: resets, reboots, gaps and first sightings."""

from __future__ import annotations

import datetime as dt

from remediator.signals import MAX_GAP_S, Counter, PreviousCounter, counters_of, rate_signals
from tests.builders.reports import LABEL, T0, edac_report


def ce(value: int) -> Counter:
    return Counter("edac:mc0:dimm2:ce", value, LABEL, "dimm_ce_rate")


def ue(value: int) -> Counter:
    return Counter("edac:mc0:dimm2:ue", value, LABEL, "dimm_ue_rate")


def before(value: int, seconds_ago: float, boot: str | None = "b1") -> PreviousCounter:
    return PreviousCounter(value, T0 - dt.timedelta(seconds=seconds_ago), boot)


def test_rate_is_delta_over_elapsed() -> None:
    [signal] = rate_signals([ce(3100)], {"edac:mc0:dimm2:ce": before(100, 60)}, now=T0, boot_id="b1")
    assert signal.kind == "dimm_ce_rate"
    assert signal.subject == LABEL
    assert signal.value == 50.0
    assert signal.detail["delta"] == 3000


def test_first_sighting_has_no_rate() -> None:
    assert rate_signals([ce(5000)], {}, now=T0, boot_id="b1") == []


def test_unchanged_counter_says_nothing() -> None:
    assert rate_signals([ce(7)], {"edac:mc0:dimm2:ce": before(7, 60)}, now=T0, boot_id="b1") == []


def test_decrease_is_a_reset_never_a_negative_rate() -> None:
    signals = rate_signals([ce(4)], {"edac:mc0:dimm2:ce": before(9000, 60)}, now=T0, boot_id="b1")
    assert [s.kind for s in signals] == ["counter_reset"]
    assert signals[0].detail["before"] == 9000


def test_reboot_resets_even_if_counter_grew() -> None:
    signals = rate_signals([ce(50)], {"edac:mc0:dimm2:ce": before(10, 60, boot="b0")}, now=T0, boot_id="b1")
    assert [s.kind for s in signals] == ["counter_reset"]
    assert signals[0].detail["rebooted"] is True


def test_long_gap_gives_no_rate() -> None:
    prev = {"edac:mc0:dimm2:ce": before(0, MAX_GAP_S + 1)}
    assert rate_signals([ce(10**6)], prev, now=T0, boot_id="b1") == []


def test_out_of_order_report_gives_no_rate() -> None:
    prev = {"edac:mc0:dimm2:ce": before(0, -30)}  # the stored value is newer than this report
    assert rate_signals([ce(10)], prev, now=T0, boot_id="b1") == []


def test_ue_first_seen_and_increment() -> None:
    [first] = rate_signals([ue(1)], {}, now=T0, boot_id="b1")
    assert (first.kind, first.value) == ("dimm_ue", 1)
    signals = rate_signals([ue(3)], {"edac:mc0:dimm2:ue": before(1, 60)}, now=T0, boot_id="b1")
    assert {s.kind for s in signals} == {"dimm_ue_rate", "dimm_ue"}
    assert next(s for s in signals if s.kind == "dimm_ue").value == 2


def test_saturated_counter_is_flagged() -> None:
    [signal] = rate_signals([ce(2**32 - 1)], {"edac:mc0:dimm2:ce": before(2**32 - 61, 60)}, now=T0, boot_id="b1")
    assert signal.detail["saturated"] is True


def test_counters_of_report_are_keyed_by_controller_and_entry() -> None:
    keys = {c.key: c for c in counters_of(edac_report(ce=12, ue=1))}
    assert keys["edac:mc0:dimm2:ce"].value == 12
    assert keys["edac:mc0:dimm2:ue"].value == 1
    assert keys["edac:mc0:dimm2:ce"].subject == LABEL
