"""Remediation actions on virtual hosts: each changes the reports the way the real action changes a machine."""

from __future__ import annotations

import datetime as dt

import pytest

from checker.schemas import Report
from checker.sim import SimulatedFleet, VirtualHost
from checker.sim.events import faulty_core
from checker.sim.hardware import EDAC_POLL_TUNED_MSEC, OPTERON_PATCHED_KERNEL, OPTERON_STOCK_KERNEL
from remediator.signals import SignalValue
from tests.builders.observations import T0, Watch, clean_fleet, host_for, of


class Session:
    """One host under test: reports a minute apart, derived signals, actions in between."""

    def __init__(self, kind: str | None = None, *, hardware: str | None = None, **fault: object) -> None:
        self.fleet: SimulatedFleet = clean_fleet()
        if hardware is not None:
            self.host: VirtualHost = next(h for h in self.fleet.hosts if h.hardware.name == hardware)
        else:
            self.host = host_for(self.fleet, kind or "dimm_ce_moderate")
        self.watch = Watch(self.host)
        self.minute = 0
        self.fault = None
        if kind is not None:
            self.fault = self.fleet.fault(kind, 1)
            for name, value in fault.items():
                setattr(self.fault, name, value)
            self.host.inject(self.fault)

    def step(self, minutes: int = 1) -> tuple[Report, list[SignalValue]]:
        report = self.host.report(T0 + dt.timedelta(minutes=self.minute))
        self.minute += minutes
        return report, self.watch(report)

    def steps(self, count: int) -> list[SignalValue]:
        signals: list[SignalValue] = []
        for _ in range(count):
            signals += self.step()[1]
        return signals

    def apply(self, action: str, **params: object) -> dict[str, object]:
        result = self.host.apply(action, params)
        assert result["action"] == action
        return result


def ce_total(report: Report) -> int:
    return sum(d.ce_count for c in report.observations.edac.controllers for d in c.dimms)


def kernel_kinds(signals: list[SignalValue]) -> set[str]:
    return {s.subject for s in of(signals, "kernel_event_count")}


def test_reboot_resets_counters_clears_lockups_but_not_a_bad_dimm() -> None:
    run = Session("soft_lockups")
    dimm = run.fleet.fault("dimm_ce_moderate", 2)
    run.host.inject(dimm)
    before, _ = run.step()
    run.steps(5)
    grown, _ = run.step()
    assert ce_total(grown) > ce_total(before)
    result = run.apply("reboot", kind="warm")
    assert result["outcome"] == "done"
    assert result["changed"]["cleared"] == ["soft_lockups"]
    after, signals = run.step()
    assert after.host.boot_id != grown.host.boot_id == before.host.boot_id
    assert after.observations.kernel_log.rebooted
    assert ce_total(after) < ce_total(grown)  # counters start again from zero
    assert of(signals, "counter_reset")
    assert "soft_lockup" not in kernel_kinds(run.steps(60))
    assert [f.kind for f in run.host.faults] == ["dimm_ce_moderate"]
    assert ce_total(run.step()[0]) > 0  # the DIMM still throws errors


def test_cold_reboot_logs_the_power_cycle_in_the_sel() -> None:
    run = Session(hardware="compute-skx-2s")
    run.step()
    run.apply("reboot", kind="cold")
    report, _ = run.step()
    events = [e.event for e in report.observations.sel.entries]
    assert "Power off/down" in events
    assert "OEM System boot event" in events


def test_reflash_bios_and_bmc() -> None:
    run = Session("firmware_old_bios")
    run.host.inject(run.fleet.fault("firmware_old_bmc"))
    _, signals = run.step()
    assert {s.subject for s in of(signals, "firmware_below_baseline")} == {"bios", "bmc"}
    hw = run.host.hardware
    bios = run.apply("reflash_firmware", component="bios", version=hw.bios_version)
    assert bios["changed"]["previous"] == hw.old_bios_version
    assert bios["changed"]["cleared"] == ["firmware_old_bios"]
    report, signals = run.step()
    assert report.observations.identity.firmware.bios_version == hw.bios_version
    assert report.observations.kernel_log.rebooted  # a BIOS update applies at reboot
    assert {s.subject for s in of(signals, "firmware_below_baseline")} == {"bmc"}
    run.apply("reflash_firmware", component="bmc", version=hw.bmc_firmware)
    report, signals = run.step()
    assert of(signals, "firmware_below_baseline") == []
    assert not report.observations.kernel_log.rebooted  # the BMC resets, not the host
    nic = hw.nic_interfaces[0]
    run.apply("reflash_firmware", component=f"nic:{nic}", version="1.0")
    assert {s.subject for s in of(run.step()[1], "firmware_below_baseline")} == {f"nic:{nic}"}
    with pytest.raises(ValueError, match="no firmware component"):
        run.apply("reflash_firmware", component="raid", version="1")


def test_install_kernel_clears_the_erratum_only_with_the_patched_kernel() -> None:
    run = Session("errata_unpatched")
    assert of(run.step()[1], "errata_match")
    run.apply("install_kernel", release="2.6.32.12-0.7-default")  # a newer stock kernel is still unpatched
    report, signals = run.step()
    assert report.observations.identity.kernel == "2.6.32.12-0.7-default"
    assert of(signals, "errata_match")
    result = run.apply("install_kernel", release=OPTERON_PATCHED_KERNEL)
    assert result["changed"]["cleared"] == ["errata_unpatched"]
    report, signals = run.step()
    assert report.observations.identity.kernel == OPTERON_PATCHED_KERNEL
    assert of(signals, "errata_match") == []


@pytest.mark.parametrize("succeeds", [True, False])
def test_hard_ppr_repairs_a_moderate_dimm_when_it_works(succeeds: bool) -> None:
    run = Session("dimm_ce_moderate", ppr_success=succeeds, ce_per_s=1.0)
    run.steps(3)
    locator = run.host.dimms[1].locator
    result = run.apply("hard_ppr", dimm=locator)
    assert result["changed"]["repaired"] is succeeds
    assert result["changed"]["dimm"] == locator
    first, _ = run.step()
    run.steps(10)
    last, _ = run.step()
    assert (ce_total(last) > ce_total(first)) is not succeeds


def test_hard_ppr_does_not_fix_a_storm() -> None:
    run = Session("dimm_ce_storm")
    run.steps(2)
    assert run.apply("hard_ppr", dimm=1)["changed"]["repaired"] is False
    run.step()
    assert max(s.value for s in of(run.steps(3), "dimm_ce_rate")) >= 10


def test_tuning_the_reporting_does_not_end_a_cmci_storm_nor_hide_its_errors() -> None:
    """The review's case: turning CMCI off used to 'fix' a storm by no longer counting the DIMM's errors."""
    run = Session("cmci_storm")
    signals = run.steps(10)
    assert "cmci_storm" in kernel_kinds(signals)
    result = run.apply("tune_error_reporting")
    assert result["changed"]["cleared"] == []  # nothing a reporting setting does ends a failing DIMM
    signals = run.steps(30)
    assert "cmci_storm" in kernel_kinds(signals)
    assert min(s.value for s in of(signals, "dimm_ce_rate")) >= 15  # still counted at the storm's rate


def test_tune_error_reporting_sets_the_polling_interval_of_a_polling_driver() -> None:
    run = Session("edac_poll_slow", hardware="edge-xeon-e")
    assert run.host.hardware.edac_driver == "ie31200_edac"
    signals = of(run.steps(3), "edac_poll_interval")
    assert {s.value for s in signals} == {120.0}
    assert {s.detail["counts"] for s in signals} == {"latches"}
    # 37 s would still lose all but one error per channel per poll: the fault stays
    assert run.apply("tune_error_reporting", poll_msec=EDAC_POLL_TUNED_MSEC)["changed"]["cleared"] == []
    assert run.apply("tune_error_reporting", poll_msec=1000)["changed"]["cleared"] == ["edac_poll_slow"]
    assert {s.value for s in of(run.steps(3), "edac_poll_interval")} == {1.0}


def test_repair_irq_affinity_stops_interrupts_on_isolated_cores() -> None:
    run = Session("isolated_irqs")
    signals = run.steps(3)
    assert of(signals, "isolated_cpu_irq_rate")
    assert of(signals, "irq_affinity_isolated")
    run.apply("repair_irq_affinity")
    run.step()
    after = run.steps(5)
    for kind in ("isolated_cpu_irq_rate", "irq_affinity_isolated"):
        assert of(after, kind) == []


def test_irq_affinity_cannot_stop_tlb_shootdowns_from_the_workloads_threads() -> None:
    run = Session("isolated_tlb")
    assert of(run.steps(3), "isolated_cpu_tlb_rate")
    result = run.apply("repair_irq_affinity")
    assert result["changed"]["cleared"] == []
    run.step()
    assert of(run.steps(5), "isolated_cpu_tlb_rate")  # they come from munmap in the process's own threads


def test_enable_demotion_and_interleave_weights() -> None:
    run = Session("cxl_demotion_disabled")
    run.host.inject(run.fleet.fault("cxl_interleave_default"))
    signals = run.steps(1)
    assert of(signals, "cxl_demotion_disabled")
    (mismatch,) = of(signals, "interleave_weights_mismatch")  # the class configures 5:1
    run.apply("enable_demotion")
    report, signals = run.step()
    assert report.observations.memory_tiers.demotion_enabled is True
    assert of(signals, "cxl_demotion_disabled") == []
    assert of(signals, "interleave_weights_mismatch")
    result = run.apply("set_interleave_weights", weights=mismatch.detail["configured"])  # as cyborg fills it in
    assert result["changed"]["weights"] == mismatch.detail["configured"]
    assert of(run.step()[1], "interleave_weights_mismatch") == []


def test_set_numa_balancing_turns_on_promotion() -> None:
    run = Session("cxl_promotion_disabled")
    (signal,) = of(run.steps(1), "numa_balancing_tiering_off")
    assert (signal.detail["current"], signal.detail["wanted"], signal.detail["supported"]) == (1, 3, True)
    result = run.apply("set_numa_balancing")
    assert result["changed"]["numa_balancing"] == 3
    report, signals = run.step()
    assert report.observations.memory_tiers.numa_balancing == 3
    assert of(signals, "numa_balancing_tiering_off") == []


def test_clear_sel_empties_a_full_log() -> None:
    run = Session("sel_full")
    assert of(run.steps(2), "sel_full")
    run.apply("clear_sel")
    report, signals = run.step()
    assert report.observations.sel.entry_count == 1
    assert of(signals, "sel_full") == []
    (cleared,) = of(signals, "sel_cleared")
    assert cleared.detail["reason"] in ("record_ids_backwards", "entry_count_dropped")


def test_reimage_clears_software_faults_and_keeps_hardware_ones() -> None:
    run = Session("errata_unpatched")
    for kind in ("soft_lockups", "panic", "firmware_old_bmc"):
        run.host.inject(run.fleet.fault(kind))
    run.steps(2)
    result = run.apply("reimage")
    assert set(result["changed"]["cleared"]) == {"errata_unpatched", "soft_lockups", "panic"}
    report, signals = run.step()
    assert report.observations.identity.kernel == run.host.hardware.kernel
    assert report.observations.identity.kernel != OPTERON_STOCK_KERNEL
    assert {s.subject for s in of(signals, "firmware_below_baseline")} == {"bmc"}  # firmware is not software
    assert [f.kind for f in run.host.faults] == ["firmware_old_bmc"]


def test_power_cycle_brings_a_down_host_back() -> None:
    run = Session(hardware="storage-epyc-1s")
    before, _ = run.step()
    run.host.inject(run.fleet.fault("unreachable"))
    assert run.host.down
    assert run.host.hostname not in {r.host.hostname for r in run.fleet.reports(T0 + dt.timedelta(minutes=1))}
    assert run.apply("reboot")["outcome"] == "failed"  # nothing answers but the BMC
    result = run.apply("power_cycle")
    assert result["changed"]["was_down"] is True
    assert not run.host.down
    after, _ = run.step()
    assert after.host.boot_id != before.host.boot_id


@pytest.mark.parametrize("mode", ["hang", "fail"])
def test_a_failing_action_changes_nothing_once(mode: str) -> None:
    run = Session("edac_poll_slow")
    run.step()
    run.host.fail_next_action = mode
    result = run.apply("tune_error_reporting")
    assert result["outcome"] == ("hang" if mode == "hang" else "failed")
    assert result["error"]
    assert run.host.edac_poll_msec == 120000
    assert run.host.fail_next_action is None  # consumed
    assert run.apply("tune_error_reporting")["outcome"] == "done"
    assert run.host.edac_poll_msec == EDAC_POLL_TUNED_MSEC


def test_stay_down_leaves_the_host_down_after_the_action() -> None:
    run = Session(hardware="compute-icx-2s")
    run.step()
    run.host.fail_next_action = "stay_down"
    result = run.apply("reboot")
    assert result["outcome"] == "done"
    assert result["changed"]["down"] is True
    assert run.host.down
    assert run.apply("power_cycle")["outcome"] == "done"
    assert not run.host.down


def test_unknown_actions_and_failure_modes_are_refused() -> None:
    run = Session(hardware="compute-icx-2s")
    with pytest.raises(ValueError, match="unknown action"):
        run.apply("defragment")
    run.host.fail_next_action = "explode"
    with pytest.raises(ValueError, match="fail_next_action"):
        run.apply("reboot")


def test_offlining_the_faulty_core_stops_its_errors_until_a_reboot_brings_it_back() -> None:
    run = Session("cpu_core_errors", per_hour=60.0)
    core = faulty_core(run.host)
    assert core is not None
    errors = of(run.steps(30), "mce_cpu_corrected")
    assert {s.subject for s in errors} == {f"cpu{core}"}
    assert {s.detail["scope"] for s in errors} == {"core"}
    changed = run.apply("offline_cpu", cpu=core)["changed"]
    assert changed["faulty_core"] is True
    assert of(run.steps(30), "mce_cpu_corrected") == []  # an offline core runs nothing, errs nothing
    assert run.host.has("cpu_core_errors")  # the CPU still needs its repair
    run.apply("reboot")
    assert of(run.steps(30), "mce_cpu_corrected")  # back online after the reboot, errors and all
