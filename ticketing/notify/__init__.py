"""Slack alerts: the human-facing channel beside tickets (docs/alerts.md).

Audited changes that people must hear about are written to an outbox in the
same transaction; a periodic task groups them per channel and
delivers one Block Kit message per group through slack_sdk.
"""

from ticketing.notify.events import Subjects, audit_listeners

__all__ = ["Subjects", "audit_listeners"]
