"""Review r7, finding 2: a more urgent rule's detection on an open ticket raised its priority and gave it the
first ticket title across the rule's plan AND its escalation rungs: for a rule whose plan is a fix, the title
of the ladder's end, claiming a fix that never ran. Now the priority is always raised; the title changes only
to the rule's own first plan's ticket of the same part type, else the ticket keeps its title and the rule's
fault is added ("; also: ..."), capped at the column's length. The reviewer's scenarios
(/tmp/r7/test_r7_titles.py)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from remediator import repairs
from remediator.evaluate import Firing
from remediator.gpu_parts import ticket_part
from remediator.models import Host
from remediator.rules import Rule
from remediator.signals import SignalValue
from tests.builders.repairs import RULES, at, located
from ticketing import opening
from ticketing.models import Ticket
from ticketing.schemas import TicketRequest

BDF = "00000000:3B:00.0"


def rule(rule_id: str) -> Rule:
    found = RULES.get(rule_id)
    assert found is not None
    return found


def held_ticket(session: Session, host: Host, part_type: str, part: str, title: str) -> Ticket:
    ticket, _created = opening.open_ticket(
        session,
        TicketRequest(
            hostname=host.hostname,
            datacenter=host.datacenter,
            rack=host.rack,
            part_type=part_type,
            part=part,
            title=title,
            priority=3,
            holds_host=True,
        ),
        actor="system",
        now=at(0),
    )
    return ticket


def test_a_double_bit_ecc_on_an_nvlink_ticket_raises_it_without_claiming_a_reset(session: Session) -> None:
    """gpu-xid-dbe's plan is a GPU reset; its ticket is the ladder's end ('... and the reset failed or was
    refused'). Routed to the GPU's open NVLink ticket, no reset ran: the title must not say one failed."""
    host = located(session)
    nvlink = f"NVLink error on GPU {BDF} of web-1: Xid 74"
    ticket = held_ticket(session, host, "gpu", ticket_part("gpu", BDF), nvlink)
    signal = SignalValue("gpu_xid", BDF, 1.0, {"action": "ecc_dbe", "resettable": True, "serial": "1650", "code": 48})
    assert repairs.route_detection(session, host, Firing(rule("gpu-xid-dbe"), signal), at(30)) is not None
    session.refresh(ticket)
    assert ticket.priority == rule("gpu-xid-dbe").priority < 3
    assert ticket.title.startswith(nvlink + "; also: gpu-xid-dbe: gpu_xid 1 on")
    assert "reset failed" not in ticket.title


def test_a_hung_host_on_its_panic_ticket_raises_it_without_claiming_a_power_cycle(session: Session) -> None:
    """host-hung's plan power-cycles the host; its ticket ('unreachable after a power cycle') is the ladder's."""
    host = located(session)
    panicked = "web-1 panicked and restarted: investigate the panic"
    ticket = held_ticket(session, host, "host", "", panicked)
    signal = SignalValue("host_unreachable", "", 1.0, {"verdict": "hung"})
    assert repairs.route_detection(session, host, Firing(rule("host-hung"), signal), at(30)) is not None
    session.refresh(ticket)
    assert ticket.priority == rule("host-hung").priority < 3
    assert ticket.title.startswith(panicked + "; also: host-hung:")
    assert "after a power cycle" not in ticket.title


def test_a_rule_s_own_first_ticket_of_the_same_part_type_retitles_it() -> None:
    """The rule's own first plan's ticket for this part type is the ticket's title; a rung's is not; nor is
    another part type's (None for that part type)."""
    dbe = Firing(rule("gpu-xid-dbe"), SignalValue("gpu_xid", BDF, 1.0, {"serial": "1650"}))
    assert repairs.rule_ticket_title(dbe, "web-1", "gpu") is None  # its plan is a reset: no title of its own
    fan = Firing(rule("sensor-critical-fan"), SignalValue("sensor_critical", "FAN1", 400.0, {}))
    assert repairs.rule_ticket_title(fan, "web-1", "fan") == "Fan FAN1 past its critical threshold (400)"
    assert repairs.rule_ticket_title(fan, "web-1", "disk") is None


def test_an_added_title_is_capped_at_the_column_s_length() -> None:
    long = "x" * 480
    capped = opening.with_also(long, "gpu-xid-dbe: " + "y" * 100)
    assert len(capped) == opening.MAX_TITLE
    assert capped.startswith(long + "; also: gpu-xid-dbe")
    assert capped.endswith("…")
    assert opening.with_also("short", "more") == "short; also: more"
    assert opening.with_also("x" * 510, "more") == "x" * 510  # no room: the ticket's own title is kept whole
