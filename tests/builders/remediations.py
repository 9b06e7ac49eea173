"""Rules, rulesets, inventoried hosts and firings for the safety and hand-off tests: one rule on a CE storm,
fired on a host by two reports a minute apart, and the remediation it starts; the envelopes that
remediation sends at commit and the results its host answers with."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.dispatch import pending_tasks
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Decision, Host, Remediation
from remediator.rules import Condition, PackSafety, Rule, RuleSafety, RuleSet, Rung, Step
from tests.builders.reports import T0, edac_report

STORM = Condition(signal="dimm_ce_rate", value=10)


def rule(plan: list[str], *, escalation: list[list[str]] = (), **safety: Any) -> Rule:  # type: ignore[assignment]
    return Rule(
        id="test-rule",
        description="test",
        when=STORM,
        plan=[Step(action=a) for a in plan],
        escalation=[Rung(plan=[Step(action=a) for a in rung]) for rung in escalation],
        safety=RuleSafety(**{"cooldown": 0, "settle": 0, **safety}),
    )


def ruleset(r: Rule, **limits: Any) -> RuleSet:
    return RuleSet(rules=[r], safety=PackSafety(**{"spacing": 0, **limits}))


def hosts(session: Session, count: int, *, rack: str = "r1", datacenter: str = "dc1", prefix: str = "h") -> None:
    rows = [
        HostInventory(hostname=f"{prefix}{i}", datacenter=datacenter, rack=rack, cluster="c1") for i in range(count)
    ]
    apply_inventory(session, rows, actor="test")


def fire(session: Session, hostname: str, rs: RuleSet, at: dt.datetime = T0) -> list[int]:
    """Two reports a minute apart with a CE storm between them."""
    ingest(session, [edac_report(hostname, ce=0, at=at)], ruleset=rs)
    later = at + dt.timedelta(seconds=60)
    return ingest(session, [edac_report(hostname, ce=6000, at=later)], ruleset=rs).remediations


def remediation_of(session: Session, hostname: str) -> Remediation:
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one()
    return session.scalars(select(Remediation).where(Remediation.host_id == host.id).order_by(Remediation.id)).all()[-1]


def decisions(session: Session, hostname: str) -> list[tuple[str, str]]:
    host = session.scalars(select(Host).where(Host.hostname == hostname)).one()
    found = session.scalars(select(Decision).where(Decision.host_id == host.id).order_by(Decision.id))
    return [(d.outcome, d.reason) for d in found]


def sent_envelopes(session: Session) -> list[dict[str, Any]]:
    return [json.loads(s.args[0]["payload"]) for s in pending_tasks(session) if s.task == "cyborg.run_action"]


def result(envelope: dict[str, Any], outcome: str = "succeeded", **extra: Any) -> dict[str, Any]:
    return {
        "envelope_id": envelope["id"],
        "hostname": envelope["hostname"],
        "remediation_id": envelope["remediation_id"],
        "step": envelope["step"],
        "action": envelope["action"],
        "outcome": outcome,
        "error": None if outcome == "succeeded" else "it broke",
        "changed": {},
        "verified": {},
        "commands": [{"argv": ["simulated", envelope["action"], "{}"], "exit_status": 0, "output": "ok"}],
        **extra,
    }


def plan(session: Session, actions: list[str], escalation: list[list[str]] = (), **safety: Any):  # type: ignore[no-untyped-def,assignment]
    rs = ruleset(rule(actions, escalation=escalation, **safety))
    hosts(session, 1)
    [rid] = fire(session, "h0", rs)
    return rs, session.get_one(Remediation, rid)
