"""SMI rate and reporting mode as the centre derives them (remediator/derive/reporting.py), the
intentional firmware-first window of a running hard PPR through the real ingest path, and the check
after a PPR flow (remediator/ppr_verification.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from bench.samples import sample
from checker.schemas import (
    MAX_LINES_PER_EVENT,
    EdacController,
    EdacState,
    ErrorReporting,
    HostIdentity,
    KernelEvent,
    KernelEventKind,
    KernelLogState,
    Observations,
    Report,
    SmiPackage,
    SmiState,
)
from remediator.derive.reporting import reporting_signals
from remediator.models import Host, Remediation, RemediationState, RemediationStep, Signal, StepState
from remediator.ppr_verification import ppr_verification
from remediator.signals import SignalValue
from tests.decisions.cases_smi import GHES_LOG, smi_host, smis
from tests.decisions.harness import T0, Expect, check, register, run

AT = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)


def report(minute: float, counts: list[int], boot: str = "b1") -> Report:
    return Report(
        host=HostIdentity(hostname="h1", boot_id=boot),
        captured_at=AT + dt.timedelta(minutes=minute),
        observations=Observations(
            smi=SmiState(packages=[SmiPackage(package=i, cpu=i * 8, count=c) for i, c in enumerate(counts)])
        ),
    )


def derive(reports: list[Report], expected: str | None = "cmci") -> list[list[tuple[str, float, dict]]]:  # type: ignore[type-arg]
    memory: dict = {}  # type: ignore[type-arg]
    out = []
    for r in reports:
        found, memory = reporting_signals(
            r, [], memory, expected=expected, hardware_class="c", ppr_active=lambda: False
        )
        out.append([(s.kind, s.value, s.detail) for s in found if s.kind == "smi_rate"])
    return out


def test_first_sight_records_then_the_busiest_package_gives_the_rate() -> None:
    first, second = derive([report(0, [100, 100]), report(1, [160, 220])])
    assert first == []
    ((_kind, value, detail),) = second
    assert value == 2.0
    assert detail["delta"] == 120
    assert detail["packages"] == {"0": 60, "1": 120}
    assert detail["cpus"] == [0, 8]
    assert detail["source"] == "msr"
    # no EDAC driver in this report: no error arriving is not the same as none happening
    assert detail["errors_arriving"] is None
    assert detail["blind_spots"] == ["no EDAC driver or rasdaemon: nothing counts corrected errors per DIMM"]


def test_a_wrap_is_counted_a_reset_and_a_new_boot_are_not() -> None:
    top = 2**32 - 30
    _, wrapped, reset, _, new_boot = derive(
        [report(0, [top]), report(1, [30]), report(2, [10]), report(3, [70]), report(4, [90], boot="b2")]
    )
    assert wrapped[0][1] == 1.0
    assert wrapped[0][2]["wrapped"] is True
    assert reset == []
    assert new_boot == []


def test_the_baseline_follows_quiet_samples_only() -> None:
    memory: dict = {}  # type: ignore[type-arg]
    for minute, count in enumerate([0, 30, 60, 60 + 600]):  # 0.5/s, 0.5/s, then 10/s: not a baseline
        _, memory = reporting_signals(
            report(minute, [count]), [], memory, expected="cmci", hardware_class="c", ppr_active=lambda: False
        )
    assert memory["baseline"] == 0.5


def test_a_running_hard_ppr_is_the_intentional_firmware_first_window(session: Session, tmp_path: Path) -> None:
    """The same host as the positive scenario, but a hard-PPR step of its remediation is running."""
    host = smi_host(tmp_path)
    register(session, host)
    row = session.query(Host).filter_by(hostname=host.hostname).one()
    ppr = Remediation(host_id=row.id, rule_id="dimm-ce-ppr", state=RemediationState.running, active=True, subject="A1")
    ppr.steps.append(RemediationStep(index=0, action="hard_ppr", params={"dimm": "A1"}, state=StepState.running))
    session.add(ppr)
    session.flush()
    reports = []
    for minute in range(0, 30, 10):
        smis(host, 1234 + 5 * 60 * minute)
        host.kernel_log(sample(GHES_LOG))
        reports.append(host.cycle(minute))
    run(session, host, reports)
    check(session, host, Expect("dimm-ce-ppr", never=frozenset({"smi-firmware-first-left", "smi-storm-no-errors"})))
    modes = session.query(Signal).filter_by(host_id=row.id, kind="smi_rate_firmware_first").all()
    assert modes
    assert all(s.detail["ppr_active"] is True for s in modes)


def test_after_ppr_the_host_must_be_back_in_cmci_at_its_baseline(session: Session, tmp_path: Path) -> None:
    host = smi_host(tmp_path)
    register(session, host)
    row = session.query(Host).filter_by(hostname=host.hostname).one()
    created = T0
    ppr = Remediation(
        host_id=row.id, rule_id="dimm-ce-ppr", state=RemediationState.verifying, active=True, created_at=created
    )
    done = created + dt.timedelta(hours=1)
    ppr.steps.append(RemediationStep(index=0, action="hard_ppr", state=StepState.succeeded, finished_at=done))
    session.add(ppr)

    def signal(kind: str, at: dt.datetime, value: float, **detail: object) -> None:
        session.add(Signal(host_id=row.id, kind=kind, subject="host", value=value, detail=detail, observed_at=at))

    signal("smi_rate", created - dt.timedelta(hours=2), 0.02, mode="cmci")
    signal("smi_rate", done + dt.timedelta(minutes=5), 3.0, mode="cmci")
    session.flush()
    assert "above its baseline of 0.02/s" in (ppr_verification(session, ppr) or "")
    signal(
        "error_reporting_mode", done + dt.timedelta(minutes=6), 1.0, mode="firmware_first", by="errors", evidence=["x"]
    )
    session.flush()
    assert "still reports corrected errors firmware-first" in (ppr_verification(session, ppr) or "")
    signal("error_reporting_mode", done + dt.timedelta(minutes=7), 0.0, mode="cmci", evidence=[])
    signal("smi_rate", done + dt.timedelta(minutes=7), 0.03, mode="cmci")
    session.flush()
    assert ppr_verification(session, ppr) is None


def test_a_switch_back_that_did_not_take_escalates_to_a_ticket(
    session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """restore_cmci ran and said it succeeded, but GHES records and SMIs go on: the rule fires again while
    the fix is verified, and the next rung is a ticket."""
    from remediator import host_evaluation, host_results, runner
    from remediator.baselines import parse_baselines
    from tests.builders.runtime import rewire
    from tests.decisions.harness import RULES, remediations

    # the class's reporting mode only (the corpus's laptop CPU is below any server class's microcode)
    only_mode = parse_baselines("version: 1\nclasses:\n  compute-icx-2s: {error_reporting: cmci}\n")
    monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: only_mode)
    rewire(session, runs_actions=True)  # this process hands host actions to their hosts
    host = smi_host(tmp_path)
    register(session, host)
    minute = 0

    def firmware_first_reports(count: int) -> list[Report]:
        nonlocal minute
        out = []
        for _ in range(count):
            smis(host, 1234 + 5 * 60 * minute)
            host.kernel_log(sample(GHES_LOG))
            out.append(host.cycle(minute))
            minute += 10
        return out

    run(session, host, firmware_first_reports(2))
    [switch] = remediations(session, host.hostname)
    assert [s.action for s in switch.steps] == ["restore_cmci"]
    runner.advance(session, switch.id, ruleset=RULES, now=T0 + dt.timedelta(minutes=10))
    step = switch.steps[0]
    envelope = step.result["envelope_id"]
    done = {
        "hostname": host.hostname,
        "remediation_id": switch.id,
        "step": 0,
        "envelope_id": envelope,
        "outcome": "succeeded",
        "changed": {"error_reporting": "cmci", "verified_by": "the next reports"},
        "commands": [],
    }
    assert host_results.record_host_result(session, done, RULES, T0 + dt.timedelta(minutes=11)) == "succeeded"
    runner.advance(session, switch.id, ruleset=RULES, now=T0 + dt.timedelta(minutes=11))
    assert switch.state == RemediationState.verifying
    run(session, host, firmware_first_reports(2))
    assert switch.state == RemediationState.failed  # the fault came back while verifying: the next rung
    rungs = [r for r in remediations(session, host.hostname) if r.previous_id == switch.id]
    assert [s.action for r in rungs for s in r.steps] == ["ticket"]


def test_ghes_edac_left_loaded_after_the_switch_back_does_not_fail_the_ppr(session: Session, tmp_path: Path) -> None:
    """ghes_edac stays until reboot: 'firmware_first by configuration' is no evidence the switch did not take
    (before the fix every PPR on such a host failed)."""
    host = smi_host(tmp_path)
    register(session, host)
    row = session.query(Host).filter_by(hostname=host.hostname).one()
    ppr = Remediation(
        host_id=row.id, rule_id="dimm-ce-ppr", state=RemediationState.verifying, active=True, created_at=T0
    )
    done = T0 + dt.timedelta(hours=1)
    ppr.steps.append(RemediationStep(index=0, action="hard_ppr", state=StepState.succeeded, finished_at=done))
    session.add(ppr)
    detail = {"mode": "firmware_first", "by": "configuration", "evidence": ["EDAC driver is ghes_edac"]}
    at = done + dt.timedelta(minutes=5)
    session.add(
        Signal(host_id=row.id, kind="error_reporting_mode", subject="host", value=1.0, detail=detail, observed_at=at)
    )
    session.flush()
    assert ppr_verification(session, ppr) is None


def with_errors(minute: float, counts: list[int], **obs: object) -> Report:
    base = report(minute, counts)
    return base.model_copy(update={"observations": base.observations.model_copy(update=obs)})


def signals_of(r: Report, given: list[SignalValue], memory: dict | None = None) -> dict[str, SignalValue]:  # type: ignore[type-arg]
    found, _ = reporting_signals(r, given, memory or {}, expected="cmci", hardware_class="c", ppr_active=lambda: False)
    return {s.kind: s for s in found}


def edac() -> EdacState:
    return EdacState(controllers=[EdacController(mc=0, mc_name="i10nm", dimms=[])])


def test_sel_and_pcie_errors_arrive_without_making_the_host_firmware_first() -> None:
    """Before the fix, SEL-only CEs left errors_arriving False (an 'SMI storm' ticket for a failing DIMM)."""
    first = with_errors(0, [100], edac=edac())
    _, memory = reporting_signals(first, [], {}, expected="cmci", hardware_class="c", ppr_active=lambda: False)
    second = with_errors(1, [400], edac=edac())
    sel = SignalValue("sel_memory_ecc", "CPU 0 DIMM 8", 1.0, {})
    found = signals_of(second, [sel], memory)
    assert found["smi_rate"].detail["errors_arriving"] is True
    assert found["smi_rate"].detail["error_sources"] == ["sel"]
    assert found["error_reporting_mode"].detail["mode"] != "firmware_first"
    quiet = signals_of(second, [], memory)
    assert quiet["smi_rate"].detail["errors_arriving"] is False  # EDAC is there and counted nothing


def test_ignore_ce_makes_arriving_unknown_and_has_its_signal() -> None:
    reporting = ErrorReporting(ignore_ce=True, dont_log_ce=False, cmci_disabled=False)
    first = with_errors(0, [100], edac=edac(), error_reporting=reporting)
    _, memory = reporting_signals(first, [], {}, expected="cmci", hardware_class="c", ppr_active=lambda: False)
    found = signals_of(with_errors(1, [400], edac=edac(), error_reporting=reporting), [], memory)
    assert found["smi_rate"].detail["errors_arriving"] is None
    assert found["smi_rate"].detail["blind_spots"] == ["ignore_ce=1"]
    assert found["corrected_errors_ignored"].detail["dont_log_ce"] is False


def ghes_event(text: str) -> KernelEvent:
    lines = [line for line in text.splitlines() if "[Hardware Error]" in line]
    return KernelEvent(kind=KernelEventKind.ghes_error, lines=lines[:MAX_LINES_PER_EVENT])


def test_only_memory_error_records_say_firmware_first_and_the_section_types_are_listed() -> None:
    """Before the fix, any GHES record (a PCIe one here) made a CMCI host firmware-first."""
    pcie = (Path(__file__).parents[1] / "decisions" / "fixtures" / "ghes-pcie-corrected-root-port.log").read_text()
    log = KernelLogState(source="kmsg", events=[ghes_event(pcie)])
    found = signals_of(with_errors(0, [100], edac=edac(), kernel_log=log), [])
    mode = found["error_reporting_mode"].detail
    assert mode["mode"] != "firmware_first"
    assert mode["section_types"] == ["pcie error"]
    assert any("not evidence of how memory errors are reported" in e for e in mode["evidence"])
    memory = KernelLogState(source="kmsg", events=[ghes_event(sample(GHES_LOG))])
    found = signals_of(with_errors(0, [100], edac=edac(), kernel_log=memory), [])
    assert found["error_reporting_mode"].detail["mode"] == "firmware_first"
    assert found["error_reporting_mode"].detail["section_types"] == ["memory error"]


def test_an_smi_rate_that_tracks_the_ce_rate_is_flagged() -> None:
    first = with_errors(0, [100], edac=edac())
    _, memory = reporting_signals(first, [], {}, expected="cmci", hardware_class="c", ppr_active=lambda: False)
    ce = SignalValue("dimm_ce_rate", "A1", 2.5, {})
    found = signals_of(with_errors(1, [100 + 180], edac=edac()), [ce], memory)  # 3 SMI/s, 2.5 CE/s
    assert found["smi_rate"].detail["ce_rate"] == 2.5
    assert found["smi_rate"].detail["tracks_ce_rate"] is True
    assert found["error_reporting_mode"].detail["mode"] == "cmci"
    slow = signals_of(with_errors(1, [100 + 180], edac=edac()), [SignalValue("dimm_ce_rate", "A1", 0.1, {})], memory)
    assert slow["smi_rate"].detail["tracks_ce_rate"] is False


def test_a_dimm_tickets_evidence_carries_the_hosts_smi_rate_and_mode(session: Session, tmp_path: Path) -> None:
    from remediator.evidence import part_evidence

    host = smi_host(tmp_path)
    register(session, host)
    row = session.query(Host).filter_by(hostname=host.hostname).one()
    at = T0 + dt.timedelta(minutes=5)
    detail = {"tracks_ce_rate": True, "ce_rate": 2.5, "mode": "cmci"}
    session.add(Signal(host_id=row.id, kind="smi_rate", subject="host", value=3.0, detail=detail, observed_at=at))
    session.flush()
    bundle = part_evidence(session, row, "dimm", "CPU 0 DIMM 8", reason="test")
    assert bundle["error_reporting"]["smi_rate"]["value"] == 3.0
    assert bundle["error_reporting"]["smi_rate"]["detail"]["tracks_ce_rate"] is True
    assert "error_reporting" not in part_evidence(session, row, "host", "host", reason="test")


def test_a_bios_rollout_watches_the_reporting_mode_and_smis_not_only_more_ces() -> None:
    """A BIOS that resets reporting to firmware-first shows fewer CEs: the rollout must see the mode."""
    from tests.decisions.harness import RULES

    rollout = next(r for r in RULES.rules if r.id == "firmware-below-baseline").safety.rollout
    assert rollout is not None
    compared = {(c.signal, c.at_least) for c in rollout.compare}
    assert {("error_reporting_mode", 1), ("smi_rate", 1)} <= compared
    assert "smi-firmware-first-left" in rollout.side_effects
