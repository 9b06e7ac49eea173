"""CMCI storms attributed to the DIMM whose errors set them off, from real EDAC wording; never a reason to
turn the reporting off."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import EdacController, EdacDimm, EdacState, KernelLogState, MceRecord, Report
from remediator.derive.storms import storm_signals
from remediator.signals import SignalValue
from tests.builders.observations import Deriver, at, of, report

# The real i7core burst: 4+2+6+1+1+1+1 CEs on CPU#0Channel#2_DIMM#0 within eight seconds.
BURST = "kernel-log/kern-log-i7core-edac-ce-burst-cpu0-channel2.log"
DIMM = "CPU#0Channel#2_DIMM#0"
OLD_STORM = "May  7 06:45:21 errol kernel: [21584699.101010] mce: CMCI storm detected: switching to poll mode\n"
NEW_STORM = "May  7 06:45:21 errol kernel: [21584699.101010] mce: CPU0 BANK7 CMCI storm detected\n"


def log(text: str) -> KernelLogState:
    state = parse_kernel_log(text, "file", reference=dt.datetime(2026, 5, 7, 7, tzinfo=dt.UTC)).value
    assert state.events
    return state


def edac(*dimms: tuple[str, int]) -> EdacState:
    return EdacState(
        controllers=[
            EdacController(
                mc=0,
                mc_name="i7 core #0",
                dimms=[
                    EdacDimm(mc=0, name=f"rank{i}", layout="rank", label=label, ce_count=ce, ue_count=0)
                    for i, (label, ce) in enumerate(dimms)
                ],
            )
        ]
    )


def storms(one: Report, run: Deriver | None = None) -> list[SignalValue]:
    signals = (run or Deriver())(one)
    return of(storm_signals(one, signals), "cmci_storm")


def test_a_storm_after_a_real_burst_of_edac_errors_is_that_dimms() -> None:
    text = sample(BURST) + OLD_STORM
    (signal,) = storms(report(at(0), kernel_log=log(text), edac=edac((DIMM, 16), ("CPU#0Channel#0_DIMM#0", 0))))
    assert signal.subject == DIMM
    assert signal.detail["attributed"] is True
    assert signal.detail["attribution"] == "corrected-error counters"
    assert signal.detail["errors_by_dimm"] == {DIMM: 16}  # the kernel lines' counts: 4+2+6+1+1+1+1
    assert signal.detail["kernel"].startswith("per CPU, 15 CMCIs/s")
    assert "CMCI storm detected" in signal.detail["lines"][0]


def test_edac_counters_between_reports_attribute_a_storm_the_log_does_not_explain() -> None:
    run = Deriver()
    counters = edac(("CPU_SrcID#0_MC#0_Chan#1_DIMM#0", 100), ("CPU_SrcID#0_MC#0_Chan#2_DIMM#0", 5))
    run(report(at(0), edac=counters))
    later = edac(("CPU_SrcID#0_MC#0_Chan#1_DIMM#0", 1900), ("CPU_SrcID#0_MC#0_Chan#2_DIMM#0", 6))
    one = report(at(1), edac=later, kernel_log=log(NEW_STORM))
    signals = run(one)
    from remediator.signals import PreviousCounter, counters_of, rate_signals

    previous = {c.key: PreviousCounter(c.value, at(0), "boot-1") for c in counters_of(report(at(0), edac=counters))}
    signals += rate_signals(counters_of(one), previous, now=at(1), boot_id="boot-1")
    (signal,) = of(storm_signals(one, signals), "cmci_storm")
    assert signal.subject == "CPU_SrcID#0_MC#0_Chan#1_DIMM#0"
    assert signal.detail["share"] > 0.99
    assert (signal.detail["cpu"], signal.detail["bank"]) == (0, 7)
    assert signal.detail["kernel"] == "per bank, 5 of 64 polls (Linux 6.8 on)"
    assert signal.detail["era"] == "6.8 on"


def test_a_storm_nothing_pins_on_one_dimm_lists_the_candidates() -> None:
    spread = edac(("A1", 0), ("A2", 0), ("B1", 0))
    (signal,) = storms(report(at(0), kernel_log=log(NEW_STORM), edac=spread))
    assert signal.subject == "cpu0 bank7"
    assert signal.detail["attributed"] is False
    assert signal.detail["candidates"] == ["A1", "A2", "B1"]  # every DIMM: none showed its errors
    assert "confirm the slot" in signal.detail["note"]


def test_two_dimms_sharing_the_errors_are_candidates_not_a_guess() -> None:
    other = (
        "May  7 06:45:20 errol kernel: [21584698.800000] EDAC MC0: 14 CE error on CPU#0Channel#1_DIMM#0 "
        "(channel:1 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)\n"
    )
    (signal,) = storms(report(at(0), kernel_log=log(sample(BURST) + other + OLD_STORM)))
    assert signal.detail["attributed"] is False  # 16 against 14: neither holds 80 % of the errors
    assert set(signal.detail["candidates"]) == {DIMM, "CPU#0Channel#1_DIMM#0"}


def test_a_stray_error_on_one_dimm_does_not_carry_a_storm_it_cannot_have_caused() -> None:
    """A storm is at least 15 errors in a second before 6.8: one DIMM's single error is all of this
    report's counted errors (100 %), yet it is no storm's source; the storm's errors went uncounted."""
    stray = (
        "May  7 06:45:20 errol kernel: [21584698.800000] EDAC MC0: 1 CE error on CPU#0Channel#1_DIMM#0 "
        "(channel:1 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)\n"
    )
    (signal,) = storms(report(at(0), kernel_log=log(stray + OLD_STORM)))
    assert signal.detail["attributed"] is False
    assert signal.detail["candidates"] == ["CPU#0Channel#1_DIMM#0"]
    assert "fewer than a storm takes" in signal.detail["attribution"]
    # from 6.8 a storm takes 5 of a bank's last 64 polls: 5 errors on one DIMM can carry it
    five = stray.replace("1 CE error", "5 CE error")
    (newer,) = storms(report(at(0), kernel_log=log(five + NEW_STORM)))
    assert (newer.detail["attributed"], newer.subject) == (True, "CPU#0Channel#1_DIMM#0")


def test_a_storm_on_a_cache_bank_is_the_cpus_not_a_dimms() -> None:
    cache_check = MceRecord(cpu=0, socket=0, bank=7, status="0x9c00004000010135", error_class="cache", corrected=True)
    one = report(at(0), kernel_log=log(NEW_STORM), mce=[cache_check])
    assert storms(one) == []


def test_no_storm_no_signal() -> None:
    assert storms(report(at(0), kernel_log=log(sample(BURST)))) == []
