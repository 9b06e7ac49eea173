"""External trackers tickets are mirrored to: a Protocol, the local default and Jira.

fleetfix's own tables are the record; a tracker gets a copy that follows the
lifecycle (one issue per ticket, a comment per event, a transition per state).
Calls happen in the `ticketing.sync_tracker` Celery task, never in the request
or the remediator's transaction, so a tracker outage delays the copy and
blocks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ticketing.settings import TicketingSettings


class TrackerUnavailable(Exception):
    """The tracker could not be reached or answered 5xx/429: try again later."""


class TrackerRejected(Exception):
    """The tracker refused the request (bad project, credentials, fields): retrying will not help."""


@dataclass(frozen=True)
class IssueSnapshot:
    """What a tracker is told about a ticket."""

    ticket_id: int
    dedup_key: str
    title: str
    description: str
    priority: int
    state: str


@dataclass(frozen=True)
class ExternalIssue:
    key: str
    url: str


class Tracker(Protocol):
    name: str
    external: bool
    """False for the local tracker: there is nothing to copy to."""

    def find_or_create(self, issue: IssueSnapshot) -> ExternalIssue:
        """The open issue for this ticket's dedup key, created if there is none."""
        ...

    def posted_event_ids(self, key: str) -> set[int]:
        """Ticket events already copied to the issue (so a retried sync posts nothing twice)."""
        ...

    def comment(self, key: str, event_id: int, text: str) -> None: ...

    def move_to(self, key: str, state: str) -> bool:
        """Transition the issue to match the ticket's state; False when the workflow offers no way there."""
        ...

    def update(self, key: str, issue: IssueSnapshot) -> None:
        """Bring the issue's summary and priority label to the ticket's (a more urgent rule raised it)."""
        ...


class LocalTracker:
    """The default: tickets live in fleetfix only."""

    name = "local"
    external = False

    def find_or_create(self, issue: IssueSnapshot) -> ExternalIssue:
        return ExternalIssue(key=str(issue.ticket_id), url="")

    def posted_event_ids(self, key: str) -> set[int]:
        return set()

    def comment(self, key: str, event_id: int, text: str) -> None:
        return None

    def move_to(self, key: str, state: str) -> bool:
        return True

    def update(self, key: str, issue: IssueSnapshot) -> None:
        return None


def make_tracker(settings: TicketingSettings) -> Tracker:
    if settings.ticket_tracker == "jira":
        from ticketing.backends.jira import JiraTracker

        return JiraTracker.from_settings(settings)
    return LocalTracker()
