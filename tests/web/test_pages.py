"""The fleet dashboard, a host's timeline, and the operators' pages (approvals, rules, audit log)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from core.db import Database
from core.models import AuditEntry, Role
from remediator.models import Host, HostState, Remediation, RemediationState, RemediationStep, RuleState
from tests.builders.tickets import open_dimm_ticket
from tests.web.helpers import signed_in


def test_dashboard_counts_hosts_by_state_and_shows_what_is_going_on(client: TestClient, db: Database) -> None:
    open_dimm_ticket(db, "ams-host", datacenter="ams1")
    with db.session() as session:
        session.add_all(
            [
                Host(hostname="ams-ok-1", datacenter="ams1"),
                Host(hostname="ams-ok-2", datacenter="ams1"),
                Host(hostname="sjc-gone", datacenter="sjc2", state=HostState.unreachable),
            ]
        )
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/").text
    table = page[page.index('id="hosts-by-state"') : page.index("</table>", page.index('id="hosts-by-state"'))]
    rows = re.findall(r"<tr><td><a [^>]+>([^<]+)</a></td>(.*?)</tr>", table)
    counts = {dc: re.findall(r">(\d+)</td>", cells) for dc, cells in rows}
    # in service, remediating, awaiting repair, unreachable, maintenance
    assert counts == {"ams1": ["2", "0", "1", "0", "0"], "sjc2": ["0", "0", "0", "1", "0"]}
    assert "dimm-ce-storm" in page[page.index('id="rules-firing"') :]
    assert page.count('class="chart-svg"') == 2  # the fleet's CE rate and the ticket rate
    assert "Every rule is active; no breaker is open." in page
    assert "ams-host" in page[page.index('id="tickets"') :]


def test_dashboard_lists_active_remediations_and_held_rules(client: TestClient, db: Database) -> None:
    with db.session() as session:
        host = Host(hostname="fra-1", datacenter="fra3", state=HostState.remediating)
        session.add(host)
        session.flush()
        remediation = Remediation(host_id=host.id, rule_id="kernel-panic", state=RemediationState.running)
        remediation.steps = [RemediationStep(index=0, action="reboot")]
        session.add(remediation)
        session.add(RuleState(rule_id="dimm-ce-storm", breaker_open=True, breaker_reason="5 failures in 1h"))
        session.add(RuleState(rule_id="disk-smart-failing", breaker_open=False))
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/").text
    active = page[page.index('id="active-remediations"') :]
    assert "fra-1" in active
    assert "kernel-panic" in active
    assert "reboot" in active
    held = page[page.index('id="held-rules"') :]
    assert "dimm-ce-storm" in held
    assert "5 failures in 1h" in held


def test_host_page_is_a_timeline_of_signals_remediations_and_tickets(client: TestClient, db: Database) -> None:
    ticket_id = open_dimm_ticket(db, "web-009")
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/web-009").text
    timeline = page[page.index('id="timeline"') :]
    kinds = re.findall(r'<li class="(signal|remediation|ticket)">', timeline)
    assert {"signal", "remediation", "ticket"} <= set(kinds)
    assert f"ticket {ticket_id} opened by system:remediator" in timeline
    assert "dimm_ce_rate 50" in timeline
    stamps = re.findall(r'<span class="when">([^<]+)</span>', timeline)
    assert stamps == sorted(stamps, reverse=True)  # newest first
    assert '<span class="state awaiting_repair" id="host-state">' in page
    assert client.get("/hosts/nope").status_code == 404


def test_operator_pages_need_an_operator(client: TestClient, db: Database) -> None:
    signed_in(client, db, "tom", Role.technician)
    for path in ("/approvals", "/rules", "/audit"):
        response = client.get(path)
        assert response.status_code == 403, path
        assert "this needs operator" in response.text
    assert 'href="/approvals"' not in client.get("/").text


def waiting_remediation(db: Database) -> int:
    with db.session() as session:
        host = Host(hostname="web-050", datacenter="ams1", rack="r9")
        session.add(host)
        session.flush()
        remediation = Remediation(
            host_id=host.id,
            rule_id="dimm-ce-storm",
            state=RemediationState.awaiting_approval,
            reason="needs a person",
            datacenter="ams1",
        )
        remediation.steps = [RemediationStep(index=0, action="ticket", params={"part_type": "dimm"})]
        session.add(remediation)
        session.flush()
        return remediation.id


def test_approvals_cancel_with_a_reason_and_the_version_seen(client: TestClient, db: Database) -> None:
    remediation_id = waiting_remediation(db)
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get("/approvals").text
    assert "needs a person" in page
    version = re.search(rf'action="/approvals/{remediation_id}/cancel".*?name="version" value="(\d+)"', page, re.S)
    assert version is not None
    form = {"csrf_token": token, "version": version.group(1)}
    assert client.post(f"/approvals/{remediation_id}/cancel", data={**form, "reason": ""}).status_code == 422
    stale = client.post(f"/approvals/{remediation_id}/cancel", data={**form, "version": "0", "reason": "x"})
    assert stale.status_code == 412
    done = client.post(
        f"/approvals/{remediation_id}/cancel", data={**form, "reason": "not this week"}, follow_redirects=False
    )
    assert done.status_code == 303
    after = client.get("/approvals").text
    assert f"Remediation {remediation_id} cancelled." in after
    assert "Nothing is waiting for approval." in after
    with db.session() as session:
        assert session.get_one(Remediation, remediation_id).state == RemediationState.cancelled
        entry = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "remediator.remediation.cancel_requested")
        ).one()
        assert (entry.actor, entry.reason) == ("user:olga", "not this week")


def test_approve_goes_through_the_remediator(client: TestClient, db: Database) -> None:
    remediation_id = waiting_remediation(db)
    token = signed_in(client, db, "olga", Role.operator)
    with db.session() as session:
        version = session.get_one(Remediation, remediation_id).version
    done = client.post(
        f"/approvals/{remediation_id}/approve",
        data={"csrf_token": token, "version": str(version), "reason": "go ahead"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    with db.session() as session:
        remediation = session.get_one(Remediation, remediation_id)
        assert remediation.approved_by == "user:olga"
        assert remediation.state != RemediationState.awaiting_approval


def test_rules_page_changes_modes_resets_breakers_and_pauses_the_fleet(client: TestClient, db: Database) -> None:
    with db.session() as session:
        session.add(RuleState(rule_id="dimm-ce-storm", breaker_open=True, breaker_reason="tripped"))
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get("/rules").text
    row = page[page.index('id="rule-dimm-ce-storm"') :]
    version = re.search(r'name="version" value="(\d+)"', row)
    assert version is not None
    reset = client.post(
        "/rules/dimm-ce-storm/breaker-reset",
        data={"csrf_token": token, "version": version.group(1), "reason": "fixed the flapping sensor"},
        follow_redirects=False,
    )
    assert reset.status_code == 303
    # The form just used carries the old version now: a second change from it is refused.
    stale = client.post(
        "/rules/dimm-ce-storm/mode",
        data={"csrf_token": token, "version": version.group(1), "mode": "shadow", "reason": "watch it"},
    )
    assert stale.status_code == 412
    row = client.get("/rules").text
    row = row[row.index('id="rule-dimm-ce-storm"') :]
    fresh = re.search(r'name="version" value="(\d+)"', row)
    assert fresh is not None
    shadow = client.post(
        "/rules/dimm-ce-storm/mode",
        data={"csrf_token": token, "version": fresh.group(1), "mode": "shadow", "reason": "watch it"},
        follow_redirects=False,
    )
    assert shadow.status_code == 303
    assert (
        client.post(
            "/rules/no-such-rule/mode", data={"csrf_token": token, "version": "0", "mode": "paused", "reason": "x"}
        ).status_code
        == 404
    )
    paused = client.post(
        "/controls/pause", data={"csrf_token": token, "paused": "true", "reason": "DC move"}, follow_redirects=False
    )
    assert paused.status_code == 303
    page = client.get("/rules").text
    assert "All remediation is paused" in page
    assert "DC move" in client.get("/").text
    with db.session() as session:
        state = session.get_one(RuleState, "dimm-ce-storm")
        assert (state.breaker_open, state.mode.value if state.mode else None) == (False, "shadow")
    audit = client.get("/audit?action=remediator.rule.").text
    assert "remediator.rule.breaker_reset" in audit
    assert "remediator.rule.mode_changed" in audit
    assert "remediator.fleet.paused" not in audit  # filtered by the prefix
    assert "fixed the flapping sensor" in audit
