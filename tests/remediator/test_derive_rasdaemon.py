"""DIMM rates from rasdaemon's records: new events only, over the time since the previous report."""

from __future__ import annotations

from checker.parsers.mce import parse_ras_mc_ctl_errors
from checker.schemas import RasdaemonState
from tests.builders.observations import Deriver, at, by_subject, of, ras_event, rasdaemon, report

LABEL = "CPU_SrcID#0_MC#0_Chan#2_DIMM#0"


def test_first_sight_is_a_baseline_then_new_events_make_a_rate() -> None:
    run = Deriver()
    history = rasdaemon(*(ras_event(i, count=50) for i in range(1, 40)))
    assert run(report(at(0), rasdaemon=history)) == []  # years of history over an unknown span: no rate
    signals = run(report(at(1), rasdaemon=rasdaemon(ras_event(40, count=600), ras_event(41, count=600))))
    (rate,) = of(signals, "dimm_ce_rate")
    assert rate.subject == LABEL
    assert rate.value == 20.0  # 1200 corrected errors in 60 s
    assert rate.detail["source"] == "rasdaemon mc_event (EDAC path)"
    assert (rate.detail["first_id"], rate.detail["last_id"], rate.detail["events"]) == (40, 41, 2)


def test_events_already_seen_are_not_counted_again() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=rasdaemon(last_id=10)))
    run(report(at(1), rasdaemon=rasdaemon(ras_event(11, count=60))))
    again = run(report(at(2), rasdaemon=rasdaemon(ras_event(11, count=60), ras_event(12, count=120))))
    assert by_subject(again, "dimm_ce_rate")[LABEL].value == 2.0


def test_uncorrected_events_are_dimm_ue_and_other_dimms_are_apart() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=rasdaemon(last_id=0)))
    signals = run(
        report(
            at(1),
            rasdaemon=rasdaemon(
                ras_event(1, "Uncorrected", 1),
                ras_event(2, "Corrected", 30, label="CPU_SrcID#1_MC#0_Chan#0_DIMM#0"),
                ras_event(3, "Info", 5),
            ),
        )
    )
    assert {(s.kind, s.subject) for s in signals} == {
        ("dimm_ue", LABEL),
        ("dimm_ce_rate", "CPU_SrcID#1_MC#0_Chan#0_DIMM#0"),
    }
    assert by_subject(signals, "dimm_ue")[LABEL].detail["source"] == "rasdaemon mc_event (EDAC path)"


def test_a_recreated_database_restarts_ids() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=rasdaemon(last_id=5000)))
    signals = run(report(at(1), rasdaemon=rasdaemon(ras_event(1, count=6), ras_event(2, count=6))))
    assert by_subject(signals, "dimm_ce_rate")[LABEL].value == 0.2


def test_unlabelled_events_are_named_by_their_location() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=rasdaemon(last_id=0)))
    event = ras_event(1, count=60, label="").model_copy(update={"mc": 0, "top_layer": 0, "middle_layer": 2})
    (signal,) = run(report(at(1), rasdaemon=rasdaemon(event)))
    assert signal.subject == "mc0:0:2:-"


def test_real_ras_mc_ctl_wording() -> None:
    text = (
        "1 2024-01-02 03:04:05 +0000 1 Corrected error(s): memory read error at CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
        "location: 0:0:2:-1, addr 35576553344, grain 32, syndrome 0  area:DRAM err_code:0001:0092\n"
        "2 2024-01-02 03:04:35 +0000 30 Corrected error(s): memory read error at CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 "
        "location: 0:0:2:-1, addr 35576553344, grain 32, syndrome 0  area:DRAM err_code:0001:0092\n"
    )
    events = parse_ras_mc_ctl_errors(text).value.memory_events
    run = Deriver()
    run(report(at(0), rasdaemon=RasdaemonState(memory_events=[], last_id=0)))
    (signal,) = run(report(at(1), rasdaemon=RasdaemonState(memory_events=events, last_id=2)))
    assert signal.subject == "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
    assert signal.value == sum(e.err_count for e in events) / 60
