"""Names and bounds that several stages share, defined once.

The alert kinds and severities are named by the settings' routes and stored and
sent by ticketing's alert outbox; a hostname is the same for the report, the
inventory, host tokens and host queues; the shortest password holds for the
settings' first admin and for core.accounts; the report interval's range holds
for the settings, the API, the remediator and the host agent alike. Pure, and
shipped in the agent distribution (the report schema, core.queue and
core.settings use it).
"""

from __future__ import annotations

import enum
import re


class AlertKind(enum.StrEnum):
    """What happened, as alerts and the settings' routes name it."""

    ticket_opened = "ticket_opened"
    remediation_failed = "remediation_failed"
    remediation_escalated = "remediation_escalated"
    rule_paused = "rule_paused"
    approval_waiting = "approval_waiting"
    host_unreachable = "host_unreachable"


class AlertSeverity(enum.StrEnum):
    """Ordered from least to most urgent."""

    info = "info"
    warning = "warning"
    critical = "critical"

    @property
    def rank(self) -> int:
        return list(AlertSeverity).index(self)


HOSTNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9.\-_]*$"
HOSTNAME_MAX_LENGTH = 253
"""A host's name as reports, the inventory, tokens and host queues take it: a letter or digit first."""
_HOSTNAME = re.compile(HOSTNAME_PATTERN)


def is_hostname(text: str) -> bool:
    return len(text) <= HOSTNAME_MAX_LENGTH and _HOSTNAME.match(text) is not None


MIN_PASSWORD_LENGTH = 12
"""A person's password (and the first admin's, FLEETFIX_ADMIN_PASSWORD) has at least this many characters."""

REPORT_INTERVAL_MIN_S = 5
REPORT_INTERVAL_MAX_S = 3600
"""How often a host's agent may run its check cycle and report, in seconds (both ends allowed)."""
