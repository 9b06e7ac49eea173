"""A small Redfish service for the collector tests: http.server in a thread on 127.0.0.1, a free port.

It serves the real samples (shared/fixtures/redfish, read in place) at their own URIs (each body's
@odata.id, as the samples' MANIFEST rows give them) plus a skeleton written by us: the service root, the
Systems/Managers/Chassis collections and members, LogServices, Memory collections and the UpdateService
that lead to them. sushy-emulator (the running service tests/cyborg drive) serves no log services and no
memory metrics, hence this. It speaks what the agent uses: GET, POST SessionService/Sessions (an
X-Auth-Token session), DELETE of that session, Basic auth, and it records every request.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.samples import sample

USER, PASSWORD = "fleetfix", "s3cret-redfish"
SESSIONS = "/redfish/v1/SessionService/Sessions"
Body = dict[str, Any] | bytes | Callable[[], dict[str, Any] | bytes]


@dataclass
class Request:
    method: str
    path: str
    token: str | None


@dataclass
class RedfishService:
    """path (with its query) -> body; bytes are sent as they are (malformed JSON)."""

    resources: dict[str, Body] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)  # paths that answer only after `hang_s`
    paged: dict[str, tuple[list[dict[str, Any]], int]] = field(default_factory=dict)  # uri -> members, page size
    hang_s: float = 3.0
    actions: set[str] = field(default_factory=set)  # POST paths (besides the login) answered 204, after `hang`
    accepted: dict[str, str] = field(default_factory=dict)  # POST path -> task monitor: answered 202, Location
    trickle: set[str] = field(default_factory=set)  # GET paths whose body is sent a byte every `trickle_s`
    trickle_s: float = 0.2
    drip: set[str] = field(default_factory=set)  # GET paths whose status line and headers come a byte at a time
    requests: list[Request] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, *bodies: dict[str, Any]) -> None:
        for body in bodies:
            self.resources[body["@odata.id"]] = body

    def page(self, path: str) -> dict[str, Any] | None:
        """A page of a `paged` collection: ?$skip=N as DMTF's Redfish specification defines it, with
        Members@odata.nextLink to the next page as long as members remain."""
        base, _, query = path.partition("?")
        if base not in self.paged:
            return None
        members, size = self.paged[base]
        skip = int(query.removeprefix("$skip=")) if query.startswith("$skip=") else 0
        body = collection(path, [], Members=members[skip : skip + size], **{"Members@odata.count": len(members)})
        if skip + size < len(members):
            body["Members@odata.nextLink"] = f"{base}?$skip={skip + size}"
        return body

    def gets(self, prefix: str = "") -> list[str]:
        return [r.path for r in self.requests if r.method == "GET" and r.path.startswith(prefix)]

    def start(self) -> RedfishService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _authorised(self) -> bool:
                token = self.headers.get("X-Auth-Token")
                if token in service.sessions:
                    return True
                basic = self.headers.get("Authorization", "")
                expected = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                return basic == f"Basic {expected}"

            def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                service.requests.append(Request("GET", self.path, self.headers.get("X-Auth-Token")))
                path = self.path.rstrip("/") if self.path not in ("/redfish/v1/", "/redfish/v1") else "/redfish/v1"
                if path in service.hang:
                    time.sleep(service.hang_s)
                if path != "/redfish/v1" and not self._authorised():
                    self._send(401, b'{"error": {"code": "Base.1.0.InsufficientPrivilege", "message": "unauthorised"}}')
                    return
                body = service.resources.get(path) or service.page(path)
                if body is None:
                    self._send(404, b'{"error": {"code": "Base.1.0.ResourceMissingAtURI"}}')
                    return
                if callable(body):
                    body = body()
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                if path in service.drip:
                    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: {'x' * 400}\r\n"
                    for byte in head.encode():
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(service.trickle_s)
                    return
                if path in service.trickle:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.flush()
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(service.trickle_s)
                    return
                self._send(200, data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = json.loads(self.rfile.read(length) or b"{}")
                service.requests.append(Request("POST", self.path, None))
                if self.path in service.accepted:
                    self._send(202, b"{}", {"Location": service.accepted[self.path]})
                    return
                if self.path in service.actions:
                    if self.path in service.hang:
                        time.sleep(service.hang_s)
                    self._send(204 if self._authorised() else 401, b"")
                    return
                if self.path != SESSIONS or (sent.get("UserName"), sent.get("Password")) != (USER, PASSWORD):
                    self._send(
                        401, b'{"error": {"code": "Base.1.0.InsufficientPrivilege", "message": "bad credentials"}}'
                    )
                    return
                token = f"token-{len(service.sessions) + 1}"
                service.sessions.add(token)
                location = f"{SESSIONS}/{token}"
                self._send(
                    201, json.dumps({"@odata.id": location}).encode(), {"X-Auth-Token": token, "Location": location}
                )

            def do_DELETE(self) -> None:
                service.requests.append(Request("DELETE", self.path, self.headers.get("X-Auth-Token")))
                service.sessions.discard(self.path.rsplit("/", 1)[-1])
                self._send(204, b"")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def collection(uri: str, members: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "@odata.id": uri,
        "Members": [{"@odata.id": m} for m in members],
        "Members@odata.count": len(members),
        **extra,
    }


def skeleton(
    service: RedfishService,
    *,
    systems: dict[str, dict[str, Any]] | None = None,
    managers: dict[str, dict[str, Any]] | None = None,
    chassis: dict[str, dict[str, Any]] | None = None,
    firmware: list[str] | None = None,
) -> None:
    """Our service root and the resources leading to the samples. Each system/manager maps to
    {"logs": [entries uris], "memory": [memory uris]}; each chassis to {"Thermal": uri, "Power": uri}."""
    root: dict[str, Any] = {
        "@odata.id": "/redfish/v1",
        "Id": "RootService",
        "RedfishVersion": "1.11.0",
        "Vendor": "Test",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "Managers": {"@odata.id": "/redfish/v1/Managers"},
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "Links": {"Sessions": {"@odata.id": SESSIONS}},
    }
    if firmware is not None:
        root["UpdateService"] = {"@odata.id": "/redfish/v1/UpdateService"}
        service.add(
            {
                "@odata.id": "/redfish/v1/UpdateService",
                "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"},
            }
        )
    service.add(root, {"@odata.id": "/redfish/v1/SessionService", "Sessions": {"@odata.id": SESSIONS}})
    for kind, owners in (("Systems", systems or {}), ("Managers", managers or {})):
        service.add(collection(f"/redfish/v1/{kind}", [f"/redfish/v1/{kind}/{name}" for name in owners]))
        for name, parts in owners.items():
            base = f"/redfish/v1/{kind}/{name}"
            body: dict[str, Any] = {"@odata.id": base, "Id": name, "LogServices": {"@odata.id": f"{base}/LogServices"}}
            if "memory" in parts:
                body["Memory"] = {"@odata.id": f"{base}/Memory"}
                service.add(collection(f"{base}/Memory", parts["memory"]))
            services = [entries.rsplit("/Entries", 1)[0] for entries in parts.get("logs", [])]
            service.add(body, collection(f"{base}/LogServices", services))
            for log in services:
                service.add(
                    {"@odata.id": log, "Id": log.rsplit("/", 1)[-1], "Entries": {"@odata.id": f"{log}/Entries"}}
                )
    service.add(collection("/redfish/v1/Chassis", [f"/redfish/v1/Chassis/{name}" for name in chassis or {}]))
    for name, links in (chassis or {}).items():
        service.add(
            {"@odata.id": f"/redfish/v1/Chassis/{name}", "Id": name, **{k: {"@odata.id": v} for k, v in links.items()}}
        )


# -- what the test files share: the running service, the password file, the Dell samples behind our skeleton


def load(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(sample(f"redfish/{name}"))
    return body


@pytest.fixture(name="service")
def redfish_service_fixture() -> Iterator[RedfishService]:
    running = RedfishService().start()
    yield running
    running.stop()


@pytest.fixture(name="password_file")
def redfish_password_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "redfish-password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


DELL_SEL = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"
DELL_LCLOG = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Lclog/Entries"


def dell(service: RedfishService, *, sel: dict[str, Any] | None = None) -> None:
    """The Dell R650 samples behind our skeleton."""
    skeleton(
        service,
        systems={"System.Embedded.1": {"memory": ["/redfish/v1/Systems/System.Embedded.1/Memory/DIMM.Socket.A1"]}},
        managers={"iDRAC.Embedded.1": {"logs": [DELL_SEL, DELL_LCLOG]}},
        chassis={"System.Embedded.1": {"Thermal": "/redfish/v1/Chassis/System.Embedded.1/Thermal"}},
        firmware=[],
    )
    firmware = load("dell-idrac9-r650-firmwareinventory-collection-installed-current-previous.json")
    service.add(
        sel or load("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json"),
        load("dell-idrac9-r650-lclog-entries-page1-of-4351-nextlink-false-critical.json"),
        load("dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"),
        load("dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json"),
        load("dell-idrac9-r650-thermal-healthy-16-fans-redundancy.json"),
        firmware,
        load("dell-idrac9-r650-firmwareinventory-member-disk-bay0-dd02.json"),
    )
    for member in firmware["Members"]:  # members with no sample: our minimal bodies, the id alone
        uri = member["@odata.id"]
        service.resources.setdefault(uri, {"@odata.id": uri, "Id": uri.rsplit("/", 1)[-1]})
