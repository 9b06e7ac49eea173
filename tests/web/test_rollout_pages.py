"""The rollout pages: the list, one rollout's waves and comparison with its halt and ticket, and an
operator's resume and halt through the form (CSRF, the page's version, audited)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import select

from core.db import Database
from core.models import AuditEntry, Role
from remediator.models import Rollout
from tests.builders.rollouts import halted_rollout
from tests.web.helpers import signed_in


def test_the_pages_show_waves_comparison_halt_and_ticket(client: TestClient, db: Database) -> None:
    rollout_id, ticket_id = halted_rollout(db)
    signed_in(client, db, "vic", Role.viewer)
    dashboard = client.get("/").text
    assert f'href="/rollouts/{rollout_id}"' in dashboard[dashboard.index('id="dashboard-rollouts"') :]
    listing = client.get("/rollouts").text
    assert 'href="/rollouts"' in listing  # in the navigation
    row = listing[listing.index(f'id="rollout-row-{rollout_id}"') :]
    assert "bios 2.10.2" in row
    assert "halted" in row
    assert "1 of 20" in row
    assert f"ticket {ticket_id}" in row
    page = client.get(f"/rollouts/{rollout_id}").text
    assert 'id="rollout-state">halted<' in page
    assert "side effect on bios 2.10.2" in page
    assert f'href="/tickets/{ticket_id}"' in page
    canary = page[page.index('id="wave-0"') : page.index("</tr>", page.index('id="wave-0"'))]
    assert re.findall(r"<td>(\d+)</td>", canary) == ["1", "1", "0", "0", "0", "0"]
    comparison = page[page.index('id="comparison"') :]
    assert "1 of 1 hosts" in comparison
    assert "0 of 19 hosts" in comparison
    assert "halts" in comparison
    assert "no statistical support</span>" in comparison  # a one-host halt is not a significant difference
    assert "5.0 host-hours" in comparison
    assert "95.0 host-hours" in comparison
    assert "excluded 1: skx-019: 2.6.23.17-amdpatch is withdrawn" in comparison
    assert 'id="rollout-change"' not in page  # viewers see, operators act
    assert client.get("/rollouts/999").status_code == 404


def test_an_operator_resumes_then_halts_from_the_page(client: TestClient, db: Database) -> None:
    rollout_id, _ = halted_rollout(db)
    token = signed_in(client, db, "olga", Role.operator)
    page = client.get(f"/rollouts/{rollout_id}").text
    version = re.search(r'name="version" value="(\d+)"', page[page.index('id="rollout-change"') :])
    assert version
    assert "Resume the rollout" in page
    form = {"csrf_token": token, "version": version.group(1), "reason": "the panics were a bad PSU batch"}
    refused = client.post(f"/rollouts/{rollout_id}/resume", data={**form, "csrf_token": "forged"})
    assert refused.status_code == 403
    done = client.post(f"/rollouts/{rollout_id}/resume", data=form, follow_redirects=False)
    assert done.status_code == 303
    page = client.get(f"/rollouts/{rollout_id}").text
    assert f"Rollout {rollout_id} resumed." in page
    assert 'id="rollout-state">running<' in page
    stale = client.post(f"/rollouts/{rollout_id}/halt", data=form)  # the version the resume changed
    assert "changed by someone else" in stale.text
    version = re.search(r'name="version" value="(\d+)"', page[page.index('id="rollout-change"') :])
    assert version is not None
    client.post(f"/rollouts/{rollout_id}/halt", data={**form, "version": version.group(1), "reason": "hold on"})
    assert 'id="rollout-state">paused<' in client.get(f"/rollouts/{rollout_id}").text
    with db.session() as session:
        actors = session.execute(
            select(AuditEntry.action, AuditEntry.actor)
            .where(AuditEntry.object_type == "rollout")
            .order_by(AuditEntry.id)
        ).all()
    assert [a for a, _ in actors][-2:] == ["remediator.rollout.resumed", "remediator.rollout.halted"]
    assert actors[-1][1] == "user:olga"


def test_the_page_shows_an_expectation_met_and_one_not_judged(client: TestClient, db: Database) -> None:
    rollout_id, _ = halted_rollout(db)
    median = {"signal": "benchmark_score", "subject_pattern": None, "measure": "median", "worse": "lower", "since": ""}
    median.update(test=None, p_value=None, support=None)
    sides = {"upgraded": {"checked": 1, "median": 3.7, "examples": ["skx-000"]}, "not_upgraded": {"checked": 0}}
    expected = {"benchmark": "fleetfix-cpumem-v1", "score": 3.65, "within": 0.2, "limit": 2.92, "source": None}
    met = {**median, **sides, "expect": "expected", "expected_score": expected, "gain": "met", "halt": False}
    not_judged = {**median, **sides, "expect": "better", "expected_gain": 0.5, "gain": "not judged", "halt": False}
    met["why"] = "median 3.7 of 1 upgraded against compute-skx-2s's expected 3.65: the class performs as expected"
    not_judged["why"] = "0 hosts not yet upgraded have a value in the window: the gain cannot be compared, not judged"
    with db.session() as session:
        rollout = session.get_one(Rollout, rollout_id)
        rollout.comparison = [*rollout.comparison, met, not_judged]
    signed_in(client, db, "vic", Role.viewer)
    comparison = client.get(f"/rollouts/{rollout_id}").text
    comparison = comparison[comparison.index('id="comparison"') :]
    assert "expected 3.65 fleetfix-cpumem-v1 (limit 2.92)" in comparison
    assert "as expected</span> median 3.7 of 1 upgraded" in comparison
    assert "not judged</span> 0 hosts not yet upgraded" in comparison
