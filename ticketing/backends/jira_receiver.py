"""A local stand-in for Jira's REST API v2: the simulated tracker for tests and demos.

It keeps issues in memory with Jira's default workflow (Open, In Progress,
Resolved, Closed, Reopened), answers the calls fleetfix's Jira backend makes,
checks the credentials, and records every request so a test can assert what
Jira would have received. `unavailable = True` answers 503 to everything, and
stop()/start() on the same port is a real outage (connection refused).

    python -m ticketing.backends.jira_receiver --port 8089 --token dev-token

then run fleetfix with FLEETFIX_TICKET_TRACKER=jira,
FLEETFIX_JIRA_URL=http://127.0.0.1:8089, FLEETFIX_JIRA_PROJECT=OPS and
FLEETFIX_JIRA_API_TOKEN=dev-token. Only what fleetfix uses is implemented; the
JQL understood is `project = "P" AND labels = "L" [AND statusCategory != Done]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Jira's default workflow: status -> [(transition id, transition name, target status)]
WORKFLOW: dict[str, list[tuple[str, str, str]]] = {
    "Open": [
        ("4", "Start Progress", "In Progress"),
        ("5", "Resolve Issue", "Resolved"),
        ("2", "Close Issue", "Closed"),
    ],
    "In Progress": [
        ("301", "Stop Progress", "Open"),
        ("5", "Resolve Issue", "Resolved"),
        ("2", "Close Issue", "Closed"),
    ],
    "Resolved": [("701", "Close Issue", "Closed"), ("3", "Reopen Issue", "Reopened")],
    "Closed": [("3", "Reopen Issue", "Reopened")],
    "Reopened": [
        ("4", "Start Progress", "In Progress"),
        ("5", "Resolve Issue", "Resolved"),
        ("2", "Close Issue", "Closed"),
    ],
}
DONE = {"Resolved", "Closed"}


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True  # stop() then start() on the same port: an outage and its end
    daemon_threads = True


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: Any
    authorized: bool


@dataclass
class Issue:
    key: str
    fields: dict[str, Any]
    status: str = "Open"
    comments: list[str] = field(default_factory=list)


class JiraReceiver:
    def __init__(self, *, token: str, user: str = "", project: str = "OPS", port: int = 0) -> None:
        self.token = token
        self.user = user
        self.project = project
        self.port = port
        self.issues: dict[str, Issue] = {}
        self.requests: list[RecordedRequest] = []
        self.unavailable = False
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- running -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> JiraReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                receiver._handle(self, "GET")

            def do_POST(self) -> None:
                receiver._handle(self, "POST")

            def do_PUT(self) -> None:
                receiver._handle(self, "PUT")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="jira-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> JiraReceiver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- what a test asks --------------------------------------------------------------

    def calls(self, method: str | None = None, path_prefix: str = "") -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(path_prefix) and r.authorized
            ]

    # -- serving -----------------------------------------------------------------------

    def _authorized(self, header: str) -> bool:
        if self.user:
            expected = base64.b64encode(f"{self.user}:{self.token}".encode()).decode()
            return header == f"Basic {expected}"
        return header == f"Bearer {self.token}"

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        authorized = self._authorized(request.headers.get("Authorization", ""))
        with self._lock:
            self.requests.append(RecordedRequest(method, request.path, body, authorized))
            if self.unavailable:
                status, answer = 503, {"errorMessages": ["simulated outage"]}
            elif not authorized:
                status, answer = 401, {"errorMessages": ["authentication required"]}
            else:
                status, answer = self._route(method, request.path.split("?")[0], body)
        payload = json.dumps(answer).encode() if answer is not None else b""
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/rest/api/2/issue":
            return self._create(body)
        if method == "POST" and path == "/rest/api/2/search":
            return self._search(body)
        match = re.fullmatch(r"/rest/api/2/issue/([A-Z][A-Z0-9]*-\d+)(/comment|/transitions)?", path)
        if match is None:
            return 404, {"errorMessages": [f"no such resource {path}"]}
        issue = self.issues.get(match.group(1))
        if issue is None:
            return 404, {"errorMessages": ["Issue Does Not Exist"]}
        what = match.group(2)
        if what == "/comment" and method == "GET":
            return 200, {
                "startAt": 0,
                "maxResults": len(issue.comments),
                "total": len(issue.comments),
                "comments": [{"id": str(i + 1), "body": text} for i, text in enumerate(issue.comments)],
            }
        if what == "/comment" and method == "POST":
            issue.comments.append(str((body or {}).get("body", "")))
            return 201, {"id": str(len(issue.comments)), "body": issue.comments[-1]}
        if what == "/transitions" and method == "GET":
            offered = WORKFLOW[issue.status]
            return 200, {"transitions": [{"id": i, "name": n, "to": {"name": to}} for i, n, to in offered]}
        if what == "/transitions" and method == "POST":
            wanted = str(((body or {}).get("transition") or {}).get("id", ""))
            target = next((to for i, _n, to in WORKFLOW[issue.status] if i == wanted), None)
            if target is None:
                return 400, {"errorMessages": [f"transition {wanted} is not valid from {issue.status}"]}
            issue.status = target
            return 204, None
        if what is None and method == "GET":
            return 200, {"key": issue.key, "fields": {**issue.fields, "status": self._status(issue)}}
        if what is None and method == "PUT":  # edit issue: `fields` set, `update.labels` add and remove
            issue.fields.update((body or {}).get("fields") or {})
            labels = list(issue.fields.get("labels") or [])
            for operation in ((body or {}).get("update") or {}).get("labels") or []:
                if "remove" in operation and operation["remove"] in labels:
                    labels.remove(operation["remove"])
                if "add" in operation and operation["add"] not in labels:
                    labels.append(operation["add"])
            issue.fields["labels"] = labels
            return 204, None
        return 405, {"errorMessages": [f"{method} not allowed"]}

    def _create(self, body: Any) -> tuple[int, Any]:
        fields = (body or {}).get("fields") or {}
        project = (fields.get("project") or {}).get("key")
        if project != self.project:
            return 400, {"errorMessages": [], "errors": {"project": f"project {project!r} does not exist"}}
        if not fields.get("summary"):
            return 400, {"errorMessages": [], "errors": {"summary": "You must specify a summary of the issue."}}
        key = f"{self.project}-{len(self.issues) + 1}"
        self.issues[key] = Issue(key=key, fields=fields)
        return 201, {"id": str(len(self.issues)), "key": key, "self": f"{self.url}/rest/api/2/issue/{key}"}

    @staticmethod
    def _status(issue: Issue) -> dict[str, Any]:
        return {"name": issue.status, "statusCategory": {"key": "done" if issue.status in DONE else "indeterminate"}}

    def _search(self, body: Any) -> tuple[int, Any]:
        jql = str((body or {}).get("jql", ""))
        label = re.search(r'labels\s*=\s*"([^"]+)"', jql)
        open_only = re.search(r"statusCategory\s*!=\s*Done", jql) is not None
        found = [
            {"key": issue.key, "fields": {"status": self._status(issue), "labels": issue.fields.get("labels", [])}}
            for issue in reversed(self.issues.values())  # ORDER BY created DESC
            if (label is None or label.group(1) in issue.fields.get("labels", []))
            and not (open_only and issue.status in DONE)
        ]
        limit = int((body or {}).get("maxResults", 50))
        return 200, {"startAt": 0, "maxResults": limit, "total": len(found), "issues": found[:limit]}


def main() -> None:
    parser = argparse.ArgumentParser(description="A local stand-in for Jira's REST API v2 (docs/tickets.md).")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--token", required=True, help="The API token clients must send.")
    parser.add_argument("--user", default="", help="With a user, basic auth; without, a bearer token.")
    parser.add_argument("--project", default="OPS")
    args = parser.parse_args()
    receiver = JiraReceiver(token=args.token, user=args.user, project=args.project, port=args.port).start()
    print(f"jira receiver on {receiver.url}, project {args.project}; Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        receiver.stop()


if __name__ == "__main__":
    main()
