"""A silent host whose own link was failing is not proof of a hung host (review S7): ping's counts are
recorded, and link flaps or CRC errors on the host's only linked port, or an open NIC ticket, turn a
`hung` verdict into `unconfirmed`."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from cyborg.commands import ActionContext
from cyborg.drivers.reach import LiveReach
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Signal
from remediator.rules import load_ruleset
from remediator.unreachable import Probe, network_suspect, ping_counts, unreachable_signal, with_network
from tests.builders.reports import edac_report
from tests.cyborg.helpers import RecordedSystem

RULES = load_ruleset([])
HUNG = Probe("on", "no_answer", "hung", "h1-ipmi", "10.0.0.5", [], [])


def test_five_echo_requests_and_their_counts_reach_the_signal() -> None:
    """Before: `ping -c 2`, and only the exit status was kept (iputils exits 0 when either answered)."""
    system = RecordedSystem(tools={"ping"})
    system.answer(["ping"], "\n--- 10.0.0.5 ping statistics ---\n5 packets transmitted, 2 received, 60% packet loss\n")
    ctx = ActionContext(system, timeout_s=30)
    assert LiveReach(system, {}).ping("h1", "10.0.0.5", ctx) is True  # any reply: reachable, as iputils says
    assert system.ran[-1][:3] == ["ping", "-c", "5"]
    commands = ctx.log.as_json()
    assert ping_counts(commands) == (5, 2)
    seen = Probe("on", "answered", "agent_silent", None, "10.0.0.5", [], commands)
    host = Host(hostname="h1", last_report_at=None)
    detail = unreachable_signal(host, seen, dt.datetime.now(dt.UTC)).detail
    assert (detail["ping_sent"], detail["ping_received"]) == (5, 2)
    assert ping_counts([]) == (None, None)


def test_a_hung_verdict_is_unconfirmed_when_the_only_link_was_failing() -> None:
    assert with_network(HUNG, None).verdict == "hung"
    turned = with_network(HUNG, "its last report showed nic_link_flaps on eno1, its only linked port")
    assert turned.verdict == "unconfirmed"
    assert "only linked port" in turned.notes[-1]
    off = Probe("off", "no_answer", "powered_off", None, "10.0.0.5", [], [])
    assert with_network(off, "why").verdict == "powered_off"  # only `hung` is doubted


def located(session: Session) -> Host:
    apply_inventory(session, [HostInventory(hostname="h1", datacenter="dc1", rack="r1")], actor="test")
    ingest(session, [edac_report("h1", at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))], ruleset=RULES)
    session.flush()
    return session.scalars(select(Host).where(Host.hostname == "h1")).one()


def test_network_suspect_reads_the_last_reports_port_signals(session: Session) -> None:
    host = located(session)
    assert network_suspect(session, host) is None
    assert host.last_report_at is not None
    for redundant, subject in ((True, "ens1f1np1"), (False, "eno1")):
        session.add(
            Signal(
                host_id=host.id,
                kind="nic_link_flaps",
                subject=subject,
                value=3.0,
                detail={"redundant": redundant},
                observed_at=host.last_report_at,
            )
        )
    session.flush()
    why = network_suspect(session, host)
    assert why is not None
    assert "eno1" in why
