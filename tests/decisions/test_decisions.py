"""Every rule of the default pack decides right on real evidence, and takes none of the wrong turns
an outside review found (tests/decisions/cases.py holds the scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from remediator import host_evaluation
from remediator.baselines import parse_baselines
from tests.decisions import (
    cases_benchmark_class,  # noqa: F401 - registers its cases in CASES
    cases_capacity,  # noqa: F401 - registers its cases in CASES
    cases_capacity_review,  # noqa: F401 - registers its cases in CASES
    cases_cxl,  # noqa: F401 - registers its cases in CASES
    cases_cxl_review,  # noqa: F401 - registers its cases in CASES
    cases_cxl_review2,  # noqa: F401 - registers its cases in CASES
    cases_fans,  # noqa: F401 - registers its cases in CASES
    cases_gpu,  # noqa: F401 - registers its cases in CASES
    cases_heat,  # noqa: F401 - registers its cases in CASES
    cases_network,  # noqa: F401 - registers its cases in CASES
    cases_network_review,  # noqa: F401 - registers its cases in CASES
    cases_os,  # noqa: F401 - registers its cases in CASES
    cases_pages,  # noqa: F401 - registers its cases in CASES
    cases_pages_review,  # noqa: F401 - registers its cases in CASES
    cases_pcie,  # noqa: F401 - registers its cases in CASES
    cases_performance,  # noqa: F401 - registers its cases in CASES
    cases_redfish,  # noqa: F401 - registers its cases in CASES
    cases_xid,  # noqa: F401 - registers its cases in CASES
)
from tests.decisions.cases import CASES
from tests.decisions.harness import RULES, check, register, run


@pytest.mark.parametrize("name", sorted(CASES), ids=sorted(CASES))  # explicit: pytest shortens long ids to nameN
def test_decision(session: Session, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _rule, build = CASES[name]
    host, reports, expect = build(tmp_path)
    if host.baselines is not None:
        monkeypatch.setattr(host_evaluation, "firmware_baselines", lambda: parse_baselines(host.baselines or ""))
    register(session, host)
    run(session, host, reports)
    if expect.then is not None:
        expect.then(session, host)
    check(session, host, expect)


def test_every_rule_of_the_default_pack_has_a_scenario() -> None:
    covered = {rule for rule, _ in CASES.values() if rule is not None}
    assert {rule.id for rule in RULES.rules} - covered == set()
