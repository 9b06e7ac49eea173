"""Operators pause, resume and abort a remediation from its host's page, approve or cancel several at
once, and read the decision log per host and per rule: the API's calls, roles, versions and audit."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from core.db import Database
from core.models import AuditEntry, Role
from remediator.models import Decision, Host, Remediation, RemediationState, RemediationStep
from tests.web.helpers import signed_in


def _remediation(db: Database, hostname: str, state: RemediationState, reason: str = "needs a person") -> int:
    with db.session() as session:
        host = Host(hostname=hostname, datacenter="ams1", rack="r9")
        session.add(host)
        session.flush()
        remediation = Remediation(
            host_id=host.id, rule_id="dimm-ce-storm", state=state, reason=reason, datacenter="ams1"
        )
        remediation.steps = [RemediationStep(index=0, action="ticket", params={"part_type": "dimm"})]
        session.add(remediation)
        session.flush()
        return remediation.id


def _version(page: str, remediation_id: int) -> str:
    start = page.index(f'id="remediation-{remediation_id}-control"')
    found = re.search(r'name="version" value="(\d+)"', page[start:])
    assert found is not None
    return found.group(1)


def _audited(db: Database, action: str) -> list[tuple[str, str]]:
    with db.session() as session:
        entries = session.scalars(select(AuditEntry).where(AuditEntry.action == action)).all()
        return [(e.actor, e.reason) for e in entries]


def _get(db: Database, remediation_id: int) -> Remediation:
    with db.session() as session:
        remediation = session.get_one(Remediation, remediation_id)
        session.expunge(remediation)
        return remediation


def test_operator_pauses_resumes_and_aborts_from_the_host_page(client: TestClient, db: Database) -> None:
    remediation_id = _remediation(db, "web-060", RemediationState.running)
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get("/hosts/web-060").text
    assert f'id="pause-{remediation_id}"' in page
    assert f'id="resume-{remediation_id}"' not in page
    form = {"csrf_token": token, "version": _version(page, remediation_id), "back": "/hosts/web-060"}
    paused = client.post(
        f"/remediations/{remediation_id}/pause", data={**form, "reason": "DIMM vendor on site"}, follow_redirects=False
    )
    assert paused.status_code == 303
    assert paused.headers["location"] == f"/hosts/web-060#remediation-{remediation_id}"
    assert _get(db, remediation_id).paused_by == "user:olga"
    assert _audited(db, "remediator.remediation.paused") == [("user:olga", "DIMM vendor on site")]
    page = client.get("/hosts/web-060").text
    assert f"Remediation {remediation_id} paused." in page
    stale = client.post(f"/remediations/{remediation_id}/resume", data={**form, "reason": "go"})
    assert stale.status_code == 412  # the form was made before the pause
    assert _get(db, remediation_id).paused_by == "user:olga"
    assert f'id="resume-{remediation_id}"' in page
    form["version"] = _version(page, remediation_id)
    resumed = client.post(f"/remediations/{remediation_id}/resume", data={**form, "reason": "vendor left"})
    assert resumed.status_code == 200  # followed to the host page
    assert _get(db, remediation_id).paused_by is None
    assert _audited(db, "remediator.remediation.resumed") == [("user:olga", "vendor left")]
    form["version"] = _version(client.get("/hosts/web-060").text, remediation_id)
    client.post(f"/remediations/{remediation_id}/abort", data={**form, "reason": "wrong DIMM"})
    assert _get(db, remediation_id).state == RemediationState.cancelled
    after = client.get("/hosts/web-060").text
    assert f'id="remediation-{remediation_id}-control"' not in after  # nothing left to stop


def test_technicians_cannot_pause_or_abort(client: TestClient, db: Database) -> None:
    remediation_id = _remediation(db, "web-061", RemediationState.running)
    token = signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    page = client.get("/hosts/web-061").text
    assert f'id="remediation-{remediation_id}-control"' not in page
    for action in ("pause", "abort", "resume"):
        response = client.post(
            f"/remediations/{remediation_id}/{action}", data={"csrf_token": token, "version": "1", "reason": "x"}
        )
        assert response.status_code == 403, action
    remediation = _get(db, remediation_id)
    assert remediation.state == RemediationState.running
    assert remediation.paused_by is None


def test_bulk_cancel_does_the_current_ones_and_names_the_stale(client: TestClient, db: Database) -> None:
    first = _remediation(db, "web-070", RemediationState.awaiting_approval, "first")
    second = _remediation(db, "web-071", RemediationState.awaiting_approval, "second")
    third = _remediation(db, "web-072", RemediationState.awaiting_approval, "third")
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get("/approvals").text
    ticks = dict(re.findall(r'name="ids" value="((\d+):\d+)" form="bulk-form"', page))
    ticks = {int(rid): value for value, rid in ticks.items()}
    assert set(ticks) == {first, second, third}
    stale = f"{second}:{int(ticks[second].split(':')[1]) + 7}"
    response = client.post(
        "/approvals/bulk",
        data={
            "csrf_token": token,
            "action": "cancel",
            "reason": "rack is being decommissioned",
            "ids": [ticks[first], stale],
        },
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert _get(db, first).state == RemediationState.cancelled
    assert _get(db, second).state == RemediationState.awaiting_approval  # changed meanwhile: left alone
    assert _get(db, third).state == RemediationState.awaiting_approval  # not ticked
    shown = client.get("/approvals").text
    assert f"Cancelled: {first}." in shown
    assert f"Left alone: {second}: Remediation {second} was changed by someone else" in shown
    assert _audited(db, "remediator.remediation.cancel_requested") == [("user:olga", "rack is being decommissioned")]
    none = client.post("/approvals/bulk", data={"csrf_token": token, "action": "cancel", "reason": "x"})
    assert "Tick at least one remediation." in none.text


def test_bulk_approve_goes_through_the_remediator_and_needs_an_operator(client: TestClient, db: Database) -> None:
    first = _remediation(db, "web-080", RemediationState.awaiting_approval)
    second = _remediation(db, "web-081", RemediationState.awaiting_approval)
    ids = [f"{rid}:{_get(db, rid).version}" for rid in (first, second)]
    tech = signed_in(client, db, "tom", Role.technician, datacenter="ams1")
    refused = client.post("/approvals/bulk", data={"csrf_token": tech, "action": "approve", "reason": "x", "ids": ids})
    assert refused.status_code == 403
    assert _get(db, first).approved_by is None
    client.post("/logout", data={"csrf_token": tech})
    token = signed_in(client, db, "olga", Role.operator)
    client.post("/approvals/bulk", data={"csrf_token": token, "action": "approve", "reason": "go", "ids": ids})
    for rid in (first, second):
        remediation = _get(db, rid)
        assert remediation.approved_by == "user:olga"
        assert remediation.state != RemediationState.awaiting_approval


def test_decision_log_per_host_and_per_rule(client: TestClient, db: Database) -> None:
    with db.session() as session:
        a = Host(hostname="web-090", datacenter="ams1")
        b = Host(hostname="web-091", datacenter="ams1")
        session.add_all([a, b])
        session.flush()
        session.add_all(
            [
                Decision(host_id=a.id, rule_id="dimm-ce-storm", outcome="held", reason="<b>rack budget</b> full"),
                Decision(host_id=a.id, rule_id="disk-smart-failing", outcome="planned", reason="sda failing"),
                Decision(host_id=b.id, rule_id="dimm-ce-storm", outcome="shadow", reason="shadow mode"),
            ]
        )
    signed_in(client, db, "vic", Role.viewer)
    assert 'href="/decisions?hostname=web-090"' in client.get("/hosts/web-090").text
    host = client.get("/decisions?hostname=web-090").text
    log = host[host.index('id="decisions"') :]
    assert "&lt;b&gt;rack budget&lt;/b&gt; full" in log  # escaped, as all field text
    assert "sda failing" in log
    assert "shadow mode" not in log
    rule = client.get("/decisions?rule=dimm-ce-storm").text
    log = rule[rule.index('id="decisions"') :]
    assert "web-090" in log
    assert "web-091" in log
    assert "sda failing" not in log
    assert client.get("/decisions?hostname=nope").status_code == 404


def test_a_paused_remediation_wears_its_badge_on_the_host_page_and_the_dashboard(
    client: TestClient, db: Database
) -> None:
    """Issue 18: an operator's pause shows where the remediation is listed, not only on its Resume button."""
    paused_id = _remediation(db, "web-070", RemediationState.running)
    running_id = _remediation(db, "web-071", RemediationState.running)
    with db.session() as session:
        session.get_one(Remediation, paused_id).paused_by = "user:olga"
    signed_in(client, db, "vic", Role.viewer)
    host = client.get("/hosts/web-070").text
    assert f'<span class="state paused" id="paused-{paused_id}" title="paused by user:olga">paused</span>' in host
    assert f'id="paused-{running_id}"' not in client.get("/hosts/web-071").text
    dashboard = client.get("/").text
    table = dashboard[dashboard.index('id="active-remediations"') :]
    assert f'id="paused-{paused_id}"' in table
    assert f'id="paused-{running_id}"' not in table


def test_the_decision_log_pages_on_to_older_decisions(client: TestClient, db: Database) -> None:
    """Issue 18: past the page's 200 the log links to the older ones (by id), keeping the filters."""
    with db.session() as session:
        host = Host(hostname="web-092", datacenter="ams1")
        session.add(host)
        session.flush()
        session.add_all(
            [
                Decision(host_id=host.id, rule_id="dimm-ce-storm", outcome="held", reason=f"decision {n}")
                for n in range(205)
            ]
        )
        session.flush()
        ids = sorted(session.scalars(select(Decision.id).where(Decision.host_id == host.id)))
    signed_in(client, db, "vic", Role.viewer)
    first = client.get("/decisions?rule=dimm-ce-storm").text
    assert first.count('class="decision held"') == 200
    assert "decision 204<" in first
    assert "decision 4<" not in first
    older = re.search(r'id="decisions-older" href="([^"]+)"|href="([^"]+)" id="decisions-older"', first)
    assert older is not None
    link = (older.group(1) or older.group(2)).replace("&amp;", "&")
    assert link == f"/decisions?hostname=&rule=dimm-ce-storm&before={ids[5]}"
    second = client.get(link).text
    assert second.count('class="decision held"') == 5
    assert "decision 4<" in second
    assert "decision 5<" not in second
    assert 'id="decisions-older"' not in second
    assert 'id="decisions-newest"' in second
    assert client.get("/decisions?before=0").status_code in (400, 422)
