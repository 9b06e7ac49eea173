"""One host, one rule and a firing's evidence, for the tests of each decision policy and admission gate alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host
from remediator.rules import Condition, Rule, RuleSafety, Step
from tests.builders.reports import LABEL

EVIDENCE = {"signal": {"subject": LABEL, "value": 100.0, "kind": "dimm_ce_rate", "detail": {}}}


def rule(plan: Sequence[str] = ("reboot",), *, rule_id: str = "test-rule", **fields: Any) -> Rule:
    return Rule(
        id=rule_id,
        description="test",
        when=Condition(signal="dimm_ce_rate", value=10),
        plan=[Step(action=a) for a in plan],
        **{"safety": RuleSafety(cooldown=0, settle=0), **fields},
    )


def host(session: Session, name: str = "h0", **inventory: Any) -> Host:
    fields = {"datacenter": "dc1", "rack": "r1", "cluster": "c1", **inventory}
    apply_inventory(session, [HostInventory(hostname=name, **fields)], actor="test")
    return session.scalars(select(Host).where(Host.hostname == name)).one()
