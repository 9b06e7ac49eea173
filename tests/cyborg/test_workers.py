"""Cyborg against real Celery workers on real Redis and PostgreSQL: a central worker (and the
scheduler where timeouts matter) and a `fleetfix agent` whose simulated driver acts on a virtual
host; plans are created as the planner creates them and run the way production runs them."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db import Database, make_engine, utcnow
from core.models import AuditEntry
from core.queue import create_celery, host_signature
from cyborg.drivers.simulated import write_failure
from cyborg.envelope import Signer, generate_keypair
from remediator import planning
from remediator.models import Host, Remediation, RemediationState, StepState
from remediator.rules import Step, load_ruleset
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import FleetfixProcess, base_env, wait_until
from ticketing.models import Ticket

PACK = """\
version: 1
rules:
  - id: cyborg-test
    description: a plan for the cyborg tests (planned by the test itself)
    when: {signal: edac_poll_interval, op: "<", value: 0}
    plan: [{action: tune_error_reporting}]
    escalation:
      - plan: [{action: ticket, params: {part_type: host, title: "{hostname}: cyborg test escalated"}}]
    safety: {settle: 0, cooldown: 0}
"""


@pytest.fixture
def it_db(integration_pg_url: str) -> str:
    truncate_all(integration_pg_url)
    return integration_pg_url


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    generate_keypair(tmp_path / "action.pem", tmp_path / "action.pub")
    return tmp_path / "action.pem"


@pytest.fixture
def central_env(it_db: str, redis_url: str, tmp_path: Path, keys: Path) -> dict[str, str]:
    (tmp_path / "pack.yaml").write_text(PACK)
    return base_env(
        FLEETFIX_DATABASE_URL=it_db,
        FLEETFIX_BROKER_URL=redis_url,
        FLEETFIX_DATA_DIR=str(tmp_path / "central"),
        FLEETFIX_ACTION_KEY_FILE=str(keys),
        FLEETFIX_ACTION_EXPIRES_S="60",
        FLEETFIX_RULES_PATHS=json.dumps([str(tmp_path / "pack.yaml")]),
    )


@pytest.fixture
def central_worker(central_env: dict[str, str], tmp_path: Path) -> Iterator[FleetfixProcess]:
    with FleetfixProcess(["worker", "--concurrency", "1"], central_env, tmp_path / "worker.log") as worker:
        worker.wait_for_output("ready.")
        yield worker


def agent_env(redis_url: str, tmp_path: Path, keys: Path, **extra: str) -> dict[str, str]:
    settings = {
        "FLEETFIX_BROKER_URL": redis_url,
        "FLEETFIX_DATA_DIR": str(tmp_path / "agent"),
        "FLEETFIX_REPORT_INTERVAL_S": "3600",
        "FLEETFIX_AGENT_STATE_DIR": str(tmp_path / "agent-state"),
        "FLEETFIX_AGENT_ACTION_PUBLIC_KEY": str(keys.with_suffix(".pub")),
        "FLEETFIX_AGENT_DRIVER": "simulated",
        "FLEETFIX_AGENT_SIMULATE_FAULTS": '["edac_poll_slow"]',
        "FLEETFIX_AGENT_SIMULATE_TIME_SCALE": "0.1",
    }
    return base_env(**{**settings, **extra})


def start_agent(redis_url: str, tmp_path: Path, keys: Path, log: str = "agent.log", **extra: str) -> FleetfixProcess:
    agent = FleetfixProcess(
        ["agent", "--hostname", "sim-1"], agent_env(redis_url, tmp_path, keys, **extra), tmp_path / log
    )
    agent.wait_for_output("ready.")
    return agent


def plan(url: str, redis_url: str, tmp_path: Path, steps: list[Step]) -> int:
    """A remediation of the test rule for sim-1, admitted: run_remediation goes out when it commits."""
    create_celery(redis_url)
    ruleset = load_ruleset([tmp_path / "pack.yaml"])
    rule = ruleset.get("cyborg-test")
    assert rule is not None
    database = wired(Database(url))
    try:
        with database.session() as session:
            host = session.scalars(select(Host).where(Host.hostname == "sim-1")).one_or_none()
            if host is None:
                host = Host(hostname="sim-1", datacenter="dc1", rack="r1", cluster="c1")
                session.add(host)
                session.flush()
            now = utcnow()
            evidence = {"signal": {"kind": "edac_poll_interval", "subject": "edac", "value": 1.0, "detail": {}}}
            remediation = planning.create(session, host, rule, steps, evidence, "cyborg test", 0, None, now)
            assert remediation is not None
            assert planning.admit(session, remediation, ruleset, now)
            return remediation.id
    finally:
        database.dispose()


def query(url: str, fn: Any) -> Any:
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            return fn(session)
    finally:
        engine.dispose()


def remediation(url: str, rid: int) -> dict[str, Any]:
    def read(session: Session) -> dict[str, Any]:
        r = session.get_one(Remediation, rid)
        return {"state": r.state, "steps": [(s.action, s.state, dict(s.result or {})) for s in r.steps]}

    return query(url, read)


def applied(tmp_path: Path) -> list[str]:
    path = tmp_path / "agent-state" / "simulated-host.json"
    return [a["action"] for a in json.loads(path.read_text())["applied"]] if path.exists() else []


def test_a_multi_step_plan_runs_step_by_step_on_the_host(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    with start_agent(redis_url, tmp_path, keys) as agent:
        steps = [
            Step(action="drain"),
            Step(action="tune_error_reporting", params={"edac_poll_s": 1}),
            Step(action="reboot", params={"mode": "warm"}),
            Step(action="undrain"),
        ]
        rid = plan(it_db, redis_url, tmp_path, steps)
        done = wait_until(
            lambda: (r := remediation(it_db, rid))["state"] == RemediationState.succeeded and r,
            60,
            "the plan to succeed",
            agent,
        )
    assert [(a, s) for a, s, _ in done["steps"]] == [
        ("drain", StepState.succeeded),
        ("tune_error_reporting", StepState.succeeded),
        ("reboot", StepState.succeeded),
        ("undrain", StepState.succeeded),
    ]
    tune, reboot = done["steps"][1][2], done["steps"][2][2]
    assert tune["commands"][0]["argv"] == ["simulated", "tune_error_reporting", '{"poll_msec": 1000}']
    assert tune["changed"]["cleared"] == ["edac_poll_slow"]
    assert reboot["verified"]["boot_id"] == reboot["changed"]["boot_id"]
    assert applied(tmp_path) == ["tune_error_reporting", "reboot"]  # each once, in order
    starts = [line for line in central_worker.output().splitlines() if "cyborg.run_action" in line]
    assert starts == []  # host actions run on the host, never on the central worker


def test_an_agent_killed_mid_step_resumes_without_repeating_the_reboot(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    slow = {"FLEETFIX_AGENT_SIMULATE_TIME_SCALE": "3"}  # a warm reboot keeps the host away 21 s
    agent = start_agent(redis_url, tmp_path, keys, **slow)
    try:
        rid = plan(it_db, redis_url, tmp_path, [Step(action="reboot"), Step(action="tune_error_reporting")])
        wait_until(lambda: applied(tmp_path) == ["reboot"], 30, "the reboot to happen", agent)
        os.killpg(agent.proc.pid, signal.SIGKILL)  # the agent dies while its host is away
        agent.proc.wait(10)
    finally:
        agent.stop()
    with start_agent(redis_url, tmp_path, keys, log="agent-2.log", **slow) as again:
        done = wait_until(
            lambda: (r := remediation(it_db, rid))["state"] == RemediationState.succeeded and r,
            60,
            "the plan to resume and succeed",
            again,
        )
    reboot = done["steps"][0][2]
    assert reboot["changed"] == {"completed_across_restart": True}
    assert reboot["commands"][0]["argv"] == ["resumed after the host restarted: verifying, not repeating"]
    assert applied(tmp_path) == ["reboot", "tune_error_reporting"]  # the reboot once


def test_a_host_that_never_comes_back_is_escalated_to_a_ticket(
    central_worker: FleetfixProcess, central_env: dict[str, str], it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    with (
        FleetfixProcess(["scheduler"], central_env, tmp_path / "beat.log") as beat,
        start_agent(redis_url, tmp_path, keys) as agent,
    ):
        write_failure(tmp_path / "agent-state", "stay_down")
        rid = plan(it_db, redis_url, tmp_path, [Step(action="reboot", params={"timeout_s": 3})])
        ticket = wait_until(
            lambda: query(it_db, lambda s: s.scalars(select(Ticket)).one_or_none()), 60, "a ticket", beat
        )
        assert "cyborg.host.down" in agent.output()
    assert ticket.hostname == "sim-1"
    assert "did not come back after reboot" in ticket.title
    tried = [step for r in ticket.evidence["remediations"] for step in r["steps"] if step["action"] == "reboot"]
    assert tried[0]["result"]["envelope_id"]  # what was sent, and when, is on the ticket
    first = remediation(it_db, rid)
    assert first["state"] == RemediationState.failed
    assert first["steps"][0][2]["error"].startswith("no result from sim-1 by ")
    assert "power_cycled" not in first["steps"][0][2]  # no BMC address for it: straight to a person


def test_an_abort_stops_the_plan_between_steps(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    from remediator import stopping

    with start_agent(redis_url, tmp_path, keys, FLEETFIX_AGENT_SIMULATE_TIME_SCALE="1.5") as agent:
        rid = plan(it_db, redis_url, tmp_path, [Step(action="reboot"), Step(action="tune_error_reporting")])
        wait_until(lambda: applied(tmp_path) == ["reboot"], 30, "the reboot to start", agent)
        database = wired(Database(it_db))
        with database.session() as session:
            stopped = stopping.stop(session, rid, actor="user:ops", reason="change freeze", now=utcnow())
        database.dispose()
        assert len(stopped.revoke) == 1
        done = wait_until(
            lambda: "late_report" in (r := remediation(it_db, rid))["steps"][0][2] and r,
            40,
            "the host's report of the step it had",
            agent,
        )
    assert done["state"] == RemediationState.cancelled
    assert done["steps"][0][2]["late_report"]["outcome"] == "succeeded"
    assert done["steps"][1][1] == StepState.skipped
    assert applied(tmp_path) == ["reboot"]  # nothing after the abort ran


def test_forged_and_expired_envelopes_are_refused_on_the_host_and_reported(
    central_worker: FleetfixProcess, it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    import datetime as dt

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from cyborg.envelope import load_signer
    from tests.builders.envelopes import envelope

    with start_agent(redis_url, tmp_path, keys) as agent:
        app = create_celery(redis_url)
        attacker = Signer(Ed25519PrivateKey.generate())
        forged = {
            **attacker.sign(envelope("reboot", {"mode": "cold"}, issued_at=dt.datetime.now(dt.UTC))).model_dump(),
            "key_id": load_signer(keys).key_id,
        }
        host_signature(app, "sim-1", "cyborg.run_action", args=[forged]).apply_async()
        stale = envelope(issued_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2), expires_s=60)
        app.send_task("cyborg.run_action", args=[load_signer(keys).sign(stale).model_dump()], queue="host.sim-1")

        def refusals() -> list[str] | None:
            found = query(
                it_db,
                lambda s: [
                    e.reason.split(":")[0]
                    for e in s.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.envelope.refused"))
                ],
            )
            return found if len(found) == 2 else None

        assert sorted(wait_until(refusals, 30, "two refusals", agent)) == ["bad_signature", "expired"]
    assert applied(tmp_path) == []


def test_with_signatures_required_a_host_signed_plan_runs_and_an_unsigned_result_is_refused(
    central_env: dict[str, str], it_db: str, redis_url: str, tmp_path: Path, keys: Path
) -> None:
    from core.auth import issue_token
    from core.models import Role

    database = wired(Database(it_db))
    with database.session() as session:
        _, token = issue_token(session, name="sim-1 agent", role=Role.viewer, hostname="sim-1")
    database.dispose()
    signed_env = {**central_env, "FLEETFIX_REQUIRE_SIGNED_REPORTS": "true"}
    with (
        FleetfixProcess(["worker", "--concurrency", "1"], signed_env, tmp_path / "worker.log") as worker,
        start_agent(redis_url, tmp_path, keys, FLEETFIX_AGENT_TOKEN=token) as agent,
    ):
        worker.wait_for_output("ready.")
        rid = plan(it_db, redis_url, tmp_path, [Step(action="tune_error_reporting")])
        done = wait_until(
            lambda: (r := remediation(it_db, rid))["state"] == RemediationState.succeeded and r,
            60,
            "the signed plan to succeed",
            agent,
        )
        sent = done["steps"][0][2]
        # Anyone on the broker can send the task by name; unsigned, it is refused and changes nothing.
        forged = {"envelope_id": sent["envelope_id"], "hostname": "sim-1", "remediation_id": rid, "step": 0}
        create_celery(redis_url).send_task(
            "remediator.step_result", args=[{**forged, "outcome": "failed"}], queue="remediate"
        )
        refused = wait_until(
            lambda: query(
                it_db,
                lambda s: s.scalars(select(AuditEntry).where(AuditEntry.action == "cyborg.message.refused")).all(),
            ),
            30,
            "the unsigned result to be refused",
            worker,
        )
    assert refused[0].reason.startswith("unsigned: signatures are required")
    assert remediation(it_db, rid)["steps"][0][1] == StepState.succeeded
