"""hard_ppr names the DIMM as the firmware will: when the class's label map makes the DIMM certain, the
step's `locations` carry its SMBIOS "Bank Locator Locator" and Locator (a GHES record's `DIMM location:`
on skx/i10nm boards), so the host's capture repairs that DIMM's rows and only those; an uncertain DIMM
gets no other names (tests/decisions/cases.py, the moderate-CE case)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.sim.host import VirtualHost
from checker.sim.standalone import standalone_host
from remediator import evidence, planning
from remediator.evidence import dimm_aliases
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host
from remediator.models import Report as ReportRow
from remediator.rules import Step, load_ruleset

AT = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def stored_sim_host(session: Session) -> tuple[Host, VirtualHost]:
    sim = standalone_host("sim-ppr-1", hardware_class="compute-icx-2s")
    apply_inventory(
        session, [HostInventory(hostname="sim-ppr-1", hardware_class="compute-icx-2s", datacenter="ams1")], actor="t"
    )
    ingest(session, [sim.report(AT)], ruleset=load_ruleset([]))
    host = session.query(Host).filter_by(hostname="sim-ppr-1").one()
    return host, sim


def test_a_certain_dimm_gets_its_smbios_names(session: Session) -> None:
    host, sim = stored_sim_host(session)
    dimm = sim.dimms[3]
    aliases = dimm_aliases(session, host, dimm.label)
    assert dimm.locator in aliases
    assert aliases[0].endswith(f" {dimm.locator}")  # "Bank Locator Locator" first, as firmware prints it
    assert dimm.label not in aliases
    step = planning._with_dimm_aliases(session, host, Step(action="hard_ppr", params={"dimm": "{subject}"}), dimm.label)
    assert step.params == {"dimm": "{subject}", "locations": aliases}


def test_no_names_for_an_unknown_subject_other_actions_or_a_step_that_names_its_own(session: Session) -> None:
    host, sim = stored_sim_host(session)
    assert dimm_aliases(session, host, "CPU_SrcID#9_MC#9_Chan#9_DIMM#9") == []
    reboot = Step(action="reboot")
    assert planning._with_dimm_aliases(session, host, reboot, sim.dimms[0].label) is reboot
    own = Step(action="hard_ppr", params={"dimm": "{subject}", "locations": ["P1 DIMM_A1"]})
    assert planning._with_dimm_aliases(session, host, own, sim.dimms[0].label) is own


def test_a_locator_the_board_repeats_is_passed_only_with_its_bank_locator(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Boards that name DIMM_A1 on each socket tell them apart only by the Bank Locator: the bare Locator
    would let a record of the other socket's DIMM_A1 match, so it is left out (the label map is certain
    of the slot: P1's DIMM_A1)."""
    host, _ = stored_sim_host(session)
    report = session.scalars(select(ReportRow).where(ReportRow.host_id == host.id)).one()
    body = json.loads(json.dumps(report.body))
    first = body["observations"]["identity"]["dimms"][0]
    body["observations"]["identity"]["dimms"] = [
        dict(first, locator="DIMM_A1", bank_locator="P0"),
        dict(first, locator="DIMM_A1", bank_locator="P1"),
    ]
    report.body = body
    session.flush()
    certain = {"certain": True, "locator": "DIMM_A1", "bank_locator": "P1"}
    monkeypatch.setattr(evidence, "_dimm", lambda *args: certain)
    assert dimm_aliases(session, host, "CPU_SrcID#1_MC#0_Chan#0_DIMM#0") == ["P1 DIMM_A1"]
    body["observations"]["identity"]["dimms"].pop(0)  # the board names it once: the Locator alone is safe too
    report.body = json.loads(json.dumps(body))
    session.flush()
    assert dimm_aliases(session, host, "CPU_SrcID#1_MC#0_Chan#0_DIMM#0") == ["P1 DIMM_A1", "DIMM_A1"]
