"""Jira (REST API v2, Cloud and Data Center) as a ticket tracker.

One issue per ticket, labelled with a digest of the dedup key and with the
ticket's id, and found again by them (so a retried create adopts the issue the
first attempt made instead of making a second; a ticket whose host and part
already have an unfinished issue joins that one), a comment per ticket event carrying a `[fleetfix event N]` marker
(so a retried sync skips what is already there), and a transition when the
ticket's state changes. Endpoints: POST /rest/api/2/issue, POST
/rest/api/2/search, GET|POST /rest/api/2/issue/{key}/comment, GET|POST
/rest/api/2/issue/{key}/transitions, PUT /rest/api/2/issue/{key} (a raised
priority's summary and label) (Atlassian's REST v2 reference,
https://docs.atlassian.com/software/jira/docs/api/REST/latest/). The token is
sent as basic auth with the user (Cloud) or as a bearer token (Data Center
personal access tokens) and never appears in logs or errors.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

import httpx

from ticketing.backends import ExternalIssue, IssueSnapshot, TrackerRejected, TrackerUnavailable

if TYPE_CHECKING:
    from ticketing.settings import TicketingSettings

DEFAULT_TRANSITIONS = {
    # ticket state -> the transition name or target status name in Jira's default workflow
    "open": "Reopened",
    "in_progress": "In Progress",
    "resolved": "Resolved",
    "closed": "Closed",
    "cancelled": "Closed",
}
"""claimed and verifying have no status of their own in Jira's default workflow: a comment says it."""
MARKER = re.compile(r"\[fleetfix event (\d+)\]")
RETRY_STATUSES = {408, 409, 425, 429}
PRIORITIES = range(1, 6)  # a ticket's priority (ticketing.schemas.TicketRequest.priority: 1-5)


def dedup_label(dedup_key: str) -> str:
    """Jira labels cannot hold spaces, and DIMM labels do: the key's digest, stable across retries."""
    return "fleetfix-" + hashlib.sha256(dedup_key.encode()).hexdigest()[:20]


def ticket_label(ticket_id: int) -> str:
    return f"fleetfix-ticket-{ticket_id}"


class JiraTracker:
    name = "jira"
    external = True

    def __init__(
        self,
        base_url: str,
        *,
        project: str,
        token: str,
        user: str = "",
        issue_type: str = "Task",
        transitions: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.project = project
        self.issue_type = issue_type
        self.transitions = {**DEFAULT_TRANSITIONS, **(transitions or {})}
        auth: httpx.Auth | None = httpx.BasicAuth(user, token) if user else None
        headers = {"Accept": "application/json"}
        if not user:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(base_url=self.base_url, auth=auth, headers=headers, timeout=timeout)

    @classmethod
    def from_settings(cls, settings: TicketingSettings) -> JiraTracker:
        return cls(
            settings.jira_url,
            project=settings.jira_project,
            token=settings.jira_api_token.get_secret_value(),
            user=settings.jira_user,
            issue_type=settings.jira_issue_type,
            transitions=settings.jira_transitions,
        )

    def __repr__(self) -> str:  # never the credentials
        return f"JiraTracker({self.base_url!r}, project={self.project!r})"

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.request(method, path, json=json, params=params)
        except httpx.TransportError as error:
            raise TrackerUnavailable(f"jira {method} {path}: {type(error).__name__}: {error}") from error
        if response.status_code >= 500 or response.status_code in RETRY_STATUSES:
            raise TrackerUnavailable(f"jira {method} {path}: HTTP {response.status_code}")
        if response.status_code >= 400:
            raise TrackerRejected(f"jira {method} {path}: HTTP {response.status_code}: {_jira_errors(response)}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as error:
            raise TrackerUnavailable(f"jira {method} {path}: answer is not JSON") from error

    def issue_url(self, key: str) -> str:
        return f"{self.base_url}/browse/{key}"

    def find(self, issue: IssueSnapshot) -> str | None:
        """This ticket's issue (its ticket label), else an unfinished one for the same host and part."""
        jql = f'project = "{self.project}" AND labels = "{dedup_label(issue.dedup_key)}" ORDER BY created DESC'
        found = self._call(
            "POST", "/rest/api/2/search", json={"jql": jql, "fields": ["status", "labels"], "maxResults": 50}
        )
        candidates = (found or {}).get("issues") or []
        mine = ticket_label(issue.ticket_id)
        for candidate in candidates:
            if mine in ((candidate.get("fields") or {}).get("labels") or []):
                return str(candidate["key"])
        for candidate in candidates:
            status = (candidate.get("fields") or {}).get("status") or {}
            if (status.get("statusCategory") or {}).get("key") != "done":
                return str(candidate["key"])
        return None

    def find_or_create(self, issue: IssueSnapshot) -> ExternalIssue:
        key = self.find(issue)
        if key is None:
            labels = [
                "fleetfix",
                dedup_label(issue.dedup_key),
                ticket_label(issue.ticket_id),
                f"fleetfix-p{issue.priority}",
            ]
            fields = {
                "project": {"key": self.project},
                "summary": issue.title[:250],
                "description": issue.description,
                "issuetype": {"name": self.issue_type},
                "labels": labels,
            }
            created = self._call("POST", "/rest/api/2/issue", json={"fields": fields})
            key = str(created["key"])
        return ExternalIssue(key=key, url=self.issue_url(key))

    def update(self, key: str, issue: IssueSnapshot) -> None:
        """The ticket's summary and its one fleetfix-pN label, after a more urgent rule raised its priority
        and title (review r7, finding 3: only find_or_create wrote them, so the tracker kept the first ones).
        Edit issue: `fields` sets the summary, `update` adds and removes labels, leaving people's own."""
        wanted = f"fleetfix-p{issue.priority}"
        labels = [{"remove": f"fleetfix-p{p}"} for p in PRIORITIES if f"fleetfix-p{p}" != wanted]
        self._call(
            "PUT",
            f"/rest/api/2/issue/{key}",
            json={"fields": {"summary": issue.title[:250]}, "update": {"labels": [*labels, {"add": wanted}]}},
        )

    def posted_event_ids(self, key: str) -> set[int]:
        seen: set[int] = set()
        start = 0
        while True:
            page = self._call("GET", f"/rest/api/2/issue/{key}/comment", params={"startAt": start, "maxResults": 100})
            comments = (page or {}).get("comments") or []
            for comment in comments:
                seen.update(int(m) for m in MARKER.findall(str(comment.get("body", ""))))
            start += len(comments)
            if not comments or start >= int((page or {}).get("total", 0)):
                return seen

    def comment(self, key: str, event_id: int, text: str) -> None:
        self._call("POST", f"/rest/api/2/issue/{key}/comment", json={"body": f"{text}\n\n[fleetfix event {event_id}]"})

    def move_to(self, key: str, state: str) -> bool:
        wanted = self.transitions.get(state)
        if not wanted:
            return True
        offered = (self._call("GET", f"/rest/api/2/issue/{key}/transitions") or {}).get("transitions") or []
        for transition in offered:
            names = {str(transition.get("name", "")).lower(), str((transition.get("to") or {}).get("name", "")).lower()}
            if wanted.lower() in names:
                self._call(
                    "POST", f"/rest/api/2/issue/{key}/transitions", json={"transition": {"id": transition["id"]}}
                )
                return True
        return False


def _jira_errors(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    messages = list(body.get("errorMessages") or []) + [f"{k}: {v}" for k, v in (body.get("errors") or {}).items()]
    return "; ".join(messages)[:500] or response.text[:300]
