"""Several hosts of one rack losing their PSU input together point at the rack's feed: each power-feed
ticket says so, from the real CSV SEL of a PSU that lost its AC input; a host alone in losing it does not."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from remediator.inventory import HostInventory, apply_inventory
from tests.decisions.cases import csv_sel_cycles
from tests.decisions.harness import Expect, check, register, remediations, run, to_ticket

AC_LOST = "ipmi-sel/ipmitool-c-sel-list-intel-psu-ac-lost-redundancy.csv"


def lose_input(session: Session, tmp: Path, hostname: str, rack: str) -> str:
    host, reports = csv_sel_cycles(tmp, AC_LOST, lambda i: i <= 4, hostname=hostname)
    register(session, host, rack=rack)
    run(session, host, reports)
    check(session, host, Expect("psu-input-lost", "ticket", title="Power feed check", part_type="power_feed"))
    (remediation,) = [r for r in remediations(session, hostname) if r.rule_id == "psu-input-lost"]
    ticket = to_ticket(session, remediation)
    assert ticket is not None
    return ticket.title


def test_two_hosts_of_a_rack_losing_input_name_the_racks_feed(session: Session, tmp_path: Path) -> None:
    # a datacenter of 100 hosts, so three firings stay within the rule's breaker (5 %)
    rows = [HostInventory(hostname=f"dt-quiet-{n:03d}", datacenter="ams1", rack=f"q{n // 20}") for n in range(100)]
    apply_inventory(session, rows, actor="test")
    alone = lose_input(session, tmp_path, "dt-feed-01", "r12")
    assert "rack" not in alone  # the first host of the rack: nothing yet points past its own PSU
    second = lose_input(session, tmp_path, "dt-feed-02", "r12")
    assert second.endswith("(2 hosts of rack r12 lost input: check the rack's feed)"), second
    other_rack = lose_input(session, tmp_path, "dt-feed-03", "r13")
    assert "rack" not in other_rack
