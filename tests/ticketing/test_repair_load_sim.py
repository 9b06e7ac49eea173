"""A resolved DIMM ticket's load test end to end on a simulated host: the storm through ingest, the ticket,
the technician's resolve, the signed envelope the worker sends, a virtual host's executor running it with the
simulated driver (checker.sim.stalls answers as the real run would), its result back through
remediator.host_results, and the ticket's verdict. The cluster's drain hook is scripted, or the demo's simulated
scheduler drains, so that the drain the ticket's remediation made is a confirmed one
(cyborg.central.issuing.drain_confirmed); with neither, the load test is a drain gap."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.settings import CentralSettings
from checker.sim.standalone import standalone_host
from core.dispatch import pending_tasks
from cyborg.central import CentralCyborg
from cyborg.central.issuing import drain_confirmed
from cyborg.drivers.scheduler import SimulatedScheduler
from cyborg.drivers.simulated import SimulatedDriver
from cyborg.host.executor import RESULT_TASK, HostExecutor
from cyborg.host.journal import Journal
from remediator import host_results, runner
from remediator.models import LOAD_TEST_RULE, Remediation
from tests.builders.repairs import RULES, at, repaired, ticketed
from tests.builders.runtime import rewire
from tests.cyborg.helpers import Reports
from ticketing import service as tickets
from ticketing.models import TicketState

pytestmark = pytest.mark.usefixtures("remediator_reacts")


def drain_hook(order: Any) -> dict[str, Any]:
    argv = ["/usr/local/bin/drain", order.target.hostname]
    return {"outcome": "succeeded", "commands": [{"argv": argv, "exit_status": 0, "output": "drained"}]}


@pytest.mark.parametrize(
    ("faults", "verdict", "state"),
    [
        ([], "pass", TicketState.verifying),  # then it closes on the settle period
        (["smi_stalls"], "fail", TicketState.open),  # a 150-400 ms stall under load: reopened
        (["verify_tool_missing"], "gap", TicketState.verifying),  # said on the ticket, closes on the settle alone
    ],
)
def test_the_simulated_host_answers_the_repairs_load_test(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: CentralSettings,
    faults: list[str],
    verdict: str,
    state: TicketState,
) -> None:
    cyborg_installed["drain"] = drain_hook
    ticket = ticketed(session)
    repaired(session, ticket, at(10))
    run = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).one()
    runner.advance(session, run.id, ruleset=RULES, now=at(10))
    [message] = [s.args[0] for s in pending_tasks(session) if s.task == "cyborg.run_action"]

    host = standalone_host("web-1", hardware_class="compute-skx-2s", faults=faults)
    reports = Reports()
    verifier = CentralCyborg(settings).signer().verifier()  # the agent holds the key's public half
    executor = HostExecutor(
        "web-1", verifier=verifier, driver=SimulatedDriver(host), journal=Journal(None), reporter=reports
    )
    executor.handle(message)
    [result] = reports.of(RESULT_TASK)
    assert result["changed"]["verdict"] == verdict
    host_results.record_host_result(session, result, RULES, at(20), signer="web-1")

    ticket = tickets.lock_ticket(session, ticket.id)
    [event] = [e for e in ticket.events if e.kind == "load_test"]
    assert event.detail["verdict"] == verdict
    assert ticket.state == state


def _answered(session: Session, settings: CentralSettings, host: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ticket's load test sent and answered by the virtual host's executor: (envelope params, result)."""
    run = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).one()
    runner.advance(session, run.id, ruleset=RULES, now=at(10))
    [message] = [s.args[0] for s in pending_tasks(session) if s.task == "cyborg.run_action"]
    reports = Reports()
    verifier = CentralCyborg(settings).signer().verifier()
    executor = HostExecutor(
        "web-1", verifier=verifier, driver=SimulatedDriver(host), journal=Journal(None), reporter=reports
    )
    executor.handle(message)
    [result] = reports.of(RESULT_TASK)
    host_results.record_host_result(session, result, RULES, at(20), signer="web-1")
    return json.loads(message["payload"])["params"], result


@pytest.mark.parametrize(("faults", "verdict"), [([], "pass"), (["smi_stalls"], "fail")])
def test_the_demos_simulated_scheduler_drains_so_the_load_test_answers(
    session: Session, settings: CentralSettings, faults: list[str], verdict: str
) -> None:
    """No FLEETFIX_SCHEDULER_HOOKS (the demo's): the simulated scheduler the demo hands to the central executor
    drains the virtual host, the load test's `host_drain` is that confirmed drain, and the host answers a real
    pass or fail rather than the gap "host not drained"."""
    settings.scheduler_hooks = {}
    host = standalone_host("web-1", hardware_class="compute-skx-2s", faults=faults)
    rewire(session, cyborg=CentralCyborg(settings, scheduler=SimulatedScheduler({"web-1": host})))
    ticket = ticketed(session)
    drained_by = session.scalars(select(Remediation).where(Remediation.rule_id != LOAD_TEST_RULE)).one()
    assert drained_by.evidence["drain"]["hook"] == "simulated"
    assert host.drained
    repaired(session, ticket, at(10))

    params, result = _answered(session, settings, host)
    run = session.scalars(select(Remediation).where(Remediation.rule_id == LOAD_TEST_RULE)).one()
    assert run.evidence["host_drain"]["remediation_id"] == drained_by.id
    assert drain_confirmed(run.evidence)
    assert params["drained"] is True
    assert result["changed"]["verdict"] == verdict
    [event] = [e for e in tickets.lock_ticket(session, ticket.id).events if e.kind == "load_test"]
    assert event.detail["verdict"] == verdict
    assert event.detail["coverage"]["percent_of_available"] >= 50  # how much was tested, on the ticket
    assert event.detail["dimms_erred"] == []


def test_no_hook_and_no_scheduler_is_still_a_drain_gap(session: Session, settings: CentralSettings) -> None:
    """A real deployment without hooks keeps its behaviour: the drain is a recorded no-op, and the load test
    is a gap said on the ticket, never a pass."""
    settings.scheduler_hooks = {}
    host = standalone_host("web-1", hardware_class="compute-skx-2s")
    rewire(session, cyborg=CentralCyborg(settings))
    ticket = ticketed(session)
    repaired(session, ticket, at(10))
    params, result = _answered(session, settings, host)
    assert params["drained"] is False
    assert result["changed"]["verdict"] == "gap"
    assert not host.drained
    [event] = [e for e in tickets.lock_ticket(session, ticket.id).events if e.kind == "load_test"]
    assert "host not drained" in event.note


def test_a_memory_share_below_the_coverage_floor_lowers_the_floor(
    session: Session, cyborg_installed: dict[str, Any], settings: CentralSettings
) -> None:
    """FLEETFIX_REPAIR_LOAD_TEST_MEMORY_PERCENT below 50: the run's `min_coverage_percent` follows it down, so
    the action does not refuse it as one that could never pass, and the host passes what it was asked."""
    settings.repair_load_test_memory_percent = 30
    cyborg_installed["drain"] = drain_hook
    ticket = ticketed(session)
    repaired(session, ticket, at(10))
    params, result = _answered(session, settings, standalone_host("web-1", hardware_class="compute-skx-2s"))
    assert (params["memory_percent"], params["min_coverage_percent"]) == (30, 30)
    assert result["changed"]["verdict"] == "pass"
    assert result["changed"]["coverage"]["min_percent"] == 30
