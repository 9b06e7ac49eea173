"""The agent's Redfish client: sushy's Connector and SessionOrBasicAuth for GETs, within the cycle's budget.

sushy (OpenStack Ironic's Redfish library) owns the HTTP session, TLS verification, the Redfish session
(POST SessionService/Sessions, X-Auth-Token; Basic auth where the BMC refuses sessions) and its renewal.
The session is kept across cycles in the agent process and dropped (DELETE of the session) when a request
fails at the transport, so the next cycle starts a fresh one. Each GET's timeout is the smaller of the
setting and what is left of the collector's budget, and the Connector makes one attempt (no sushy
retries with sleeps inside a cycle): a BMC that hangs costs one timeout, not several.

The password is read from its file when a session is opened; it is never in argv, the environment or a log.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = "/redfish/v1/"
MAX_BODY_BYTES = 8 << 20
"""8 MiB per resource, our bound: the largest real answer in the samples (shared/fixtures/redfish: a Supermicro
log page of 64 entries) is 72 KiB, so 8 MiB is a BMC gone wrong, not a resource to hold in the agent's memory."""
CHUNK_BYTES = 64 << 10
RETRY_REFUSED_S = 3600.0
"""A refused password is tried again when its file changes, or after this long (our choice: an account a BMC
locked after failed logins is commonly unlocked within minutes; one attempt an hour cannot lock it again)."""


@dataclass(frozen=True)
class RedfishSettings:
    """How the agent reaches its BMC's Redfish service (FLEETFIX_AGENT_REDFISH_*; docs/agent.md, 'Redfish')."""

    url: str
    username: str = ""
    password_file: Path | None = None
    verify_tls: bool = True
    ca_bundle: Path | None = None
    timeout_s: float = 10.0
    max_entries: int = 200  # new log entries read per log service per cycle
    max_pages: int = 10  # collection pages followed per collection per cycle
    inventory_every_s: float = 3600.0  # memory and firmware are re-read this often

    @property
    def service(self) -> str:
        """The address to report: scheme, host and port only (a URL may carry credentials)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}"


class RedfishError(Exception):
    """A GET that gave no usable JSON object; the message says why (never the password)."""


class TransportError(RedfishError):
    """The BMC did not answer (refused, timed out, TLS): the session is dropped."""


class AccessDenied(RedfishError):
    """The BMC refused the credentials (401/403 after sushy's own re-authentication)."""


_watched = threading.local()  # the _Deadline of the GET this thread is making, if any


class _Deadline:
    """One wall-clock deadline for a whole GET: requests' timeouts bound each socket read only, so a BMC sending
    its status line and headers a byte at a time held a GET as long as it liked (issue 19 item 3). At the
    deadline every connection the GET opened is shut down under it; the read then fails and the GET says why."""

    def __init__(self, seconds: float) -> None:
        self.connections: list[Any] = []
        self.expired = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        _watched.deadline = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _watched.deadline = None

    def watch(self, connection: Any) -> None:
        with self._lock:
            self.connections.append(connection)
            if self.expired:
                _cut(connection)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self.connections:
                _cut(connection)


def _cut(connection: Any) -> None:
    """Shut the connection's socket down (the plain socket's shutdown, under any TLS layer: SSLSocket's own would
    unwrap it while another thread reads), so its pending read returns at once."""
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watched_adapter() -> Any:
    """A requests HTTPAdapter whose urllib3 connections put themselves under the calling GET's _Deadline."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def watched(base: type[Any]) -> type[Any]:
        class Watched(base):  # type: ignore[misc]
            def connect(self) -> None:
                super().connect()
                self._watch()

            def request(self, *args: Any, **kwargs: Any) -> None:
                self._watch()  # a kept-alive connection is not connected again
                super().request(*args, **kwargs)

            def _watch(self) -> None:
                deadline = getattr(_watched, "deadline", None)
                if deadline is not None:
                    deadline.watch(self)

        return Watched

    class Pool(HTTPConnectionPool):
        ConnectionCls = watched(HTTPConnection)

    class TlsPool(HTTPSConnectionPool):
        ConnectionCls = watched(HTTPSConnection)

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}

    return Adapter()


class RedfishClient:
    def __init__(self, settings: RedfishSettings) -> None:
        self.settings = settings
        self._connector: Any = None  # sushy.connector.Connector
        self._root: Any = None  # sushy.Sushy: kept so its SessionOrBasicAuth can renew the session
        self._auth: Any = None  # that SessionOrBasicAuth: close() ends the session with it
        self._refused: tuple[float | None, str, float] | None = None  # the password file's mtime refused, why, when
        self._lock = threading.Lock()  # between a GET opening a session and shutdown() ending it
        self._shut = False  # shutdown(): no session is opened any more
        self._in_flight: _Deadline | None = None  # the GET under way, which shutdown() cuts

    def _password(self) -> str:
        path = self.settings.password_file
        if path is None:
            return ""
        try:
            # the line ending only, as central reads its BMC password file (cyborg/drivers/redfish_client.py):
            # a password may begin or end with a space (review r5 finding 15d)
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as error:
            raise RedfishError(f"cannot read the Redfish password file {str(path)!r}: {error.strerror}") from None

    def _password_stamp(self) -> float | None:
        try:
            return self.settings.password_file.stat().st_mtime if self.settings.password_file else None
        except OSError:
            return None

    def _open(self, timeout_s: float) -> Any:
        if self._shut:
            raise TransportError("the agent is shutting down: no new Redfish session")
        if self._connector is not None:
            return self._connector
        refused = self._refused
        if (
            refused is not None
            and refused[0] == self._password_stamp()
            and time.monotonic() - refused[2] < RETRY_REFUSED_S
        ):
            # The BMC refused this password before: not tried again until the file changes. Many BMCs lock the
            # account or block the address after a few failed logins (iDRAC's IP blocking; review r5 16).
            raise AccessDenied(f"{refused[1]} (not tried again until the password file changes, or for an hour)")
        import sushy  # here, not at module level: the agent's settings import this module, and sushy takes 0.2-0.4 s
        from sushy import exceptions as sushy_errors
        from sushy.auth import SessionOrBasicAuth
        from sushy.connector import Connector

        verify: bool | str = str(self.settings.ca_bundle) if self.settings.ca_bundle else self.settings.verify_tls
        connector = Connector(
            self.settings.url.rstrip("/"),
            verify=verify,
            server_side_retries=1,  # one attempt per request: sushy's default retries sleep inside the cycle
            server_side_retries_delay=0,
            default_request_timeout=timeout_s,
        )
        adapter = _watched_adapter()
        connector._session.mount("https://", adapter)
        connector._session.mount("http://", adapter)
        auth = SessionOrBasicAuth(username=self.settings.username or None, password=self._password() or None)
        try:
            self._root = sushy.Sushy(self.settings.url.rstrip("/"), auth=auth, connector=connector)
            self._auth = auth
            # The session is ended by close(), never by Sushy.__del__: a finaliser that runs during garbage
            # collection, does network I/O and logs its failure can run inside any other code (on CPython
            # 3.11.7 a nested ast.parse from the logged traceback broke an outer one: gh-106905).
            self._root._auth = None
        except sushy_errors.ConnectionError as error:
            connector.close()
            raise TransportError(f"Redfish service {self.settings.service} did not answer: {_short(error)}") from None
        except sushy_errors.AccessError as error:
            connector.close()
            said = f"Redfish service {self.settings.service} refused the login: {_short(error)}"
            self._refused = (self._password_stamp(), said, time.monotonic())
            raise AccessDenied(said) from None
        except Exception as error:  # sushy trips over some BMCs' odd error bodies (AttributeError): not ours to raise
            connector.close()
            said = f"{type(error).__name__}: {_short(error)}"
            raise RedfishError(f"Redfish service {self.settings.service}: {said}") from None
        with self._lock:
            if not self._shut:
                self._connector = connector
                return connector
        # shutdown() came while this session was being opened: end it here, or nobody would
        with contextlib.suppress(Exception):
            auth.close()
        connector.close()
        self._root = self._auth = None
        raise TransportError("the agent is shutting down: the Redfish session just opened was ended")

    def get(self, path: str, timeout_s: float) -> dict[str, Any]:
        """GET one resource as a JSON object."""
        timeout_s = max(0.1, min(timeout_s, self.settings.timeout_s))
        deadline = time.monotonic() + timeout_s
        with _Deadline(timeout_s) as watch:  # the login, status line, headers and body: one deadline
            self._in_flight = watch
            try:
                return self._get(path, timeout_s, deadline, watch)
            finally:
                self._in_flight = None

    def _get(self, path: str, timeout_s: float, deadline: float, watch: _Deadline) -> dict[str, Any]:
        from sushy import exceptions as sushy_errors

        connector = self._open(timeout_s)
        try:
            # stream: the body is read below against a wall-clock deadline and a size cap; requests' timeout
            # bounds each socket read only, and a BMC trickling a byte at a time never trips it
            response = connector.get(path, timeout=timeout_s, stream=True)
        except sushy_errors.ConnectionError as error:
            self.close()
            if watch.expired:
                raise TransportError(f"GET {path}: no complete answer (status line, headers) by the timeout") from None
            raise TransportError(f"GET {path}: {_short(error)}") from None
        except sushy_errors.AccessError as error:
            self.close()
            said = f"GET {path}: the BMC refused the credentials ({_short(error)})"
            self._refused = (self._password_stamp(), said, time.monotonic())
            raise AccessDenied(said) from None
        except Exception as error:  # a 404, a 500, or sushy tripping over an odd error body: this resource only
            kind = "" if isinstance(error, sushy_errors.SushyError) else f"{type(error).__name__}: "
            raise RedfishError(f"GET {path}: {kind}{_short(error)}") from None
        try:
            content = _bounded_body(response, deadline, path)
        except RedfishError as error:
            if isinstance(error, TransportError):
                self.close()
            raise
        except Exception as error:  # the connection failed mid-body (urllib3's timeouts and protocol errors)
            self.close()
            if watch.expired:
                raise TransportError(f"GET {path}: the answer was still arriving at the timeout") from None
            raise TransportError(f"GET {path}: {type(error).__name__}: {_short(error)}") from None
        try:
            body = json.loads(content or b"null")
        except ValueError as error:
            raise RedfishError(f"GET {path}: not JSON ({error})") from None
        if not isinstance(body, dict):
            raise RedfishError(f"GET {path}: not a JSON object")
        return body

    def shutdown(self) -> None:
        """The agent is stopping: cut a GET under way (its cycle thread may outlive the stop's join), end the
        session, and open none again, so no session is left behind on the BMC holding one of its few slots."""
        with self._lock:
            self._shut = True
        in_flight = self._in_flight
        if in_flight is not None:
            in_flight.expire()
        self.close()

    def close(self) -> None:
        """End the Redfish session (DELETE) and the HTTP session; the next GET opens new ones."""
        with self._lock:
            auth, connector = self._auth, self._connector
            self._root = self._connector = self._auth = None
        watching, _watched.deadline = getattr(_watched, "deadline", None), None  # the logout is not the GET's
        try:
            if auth is not None:
                # sushy's own way to end the session; a BMC gone away cannot end it, and the session then times
                # out on the BMC's side.
                with contextlib.suppress(Exception):
                    auth.close()
            if connector is not None:
                connector.close()
        finally:
            _watched.deadline = watching


def _bounded_body(response: Any, deadline: float, path: str) -> bytes:
    """The response's body, read a socket read at a time until `deadline` (the request's timeout as wall
    clock) and at most MAX_BODY_BYTES (review r5 finding 5: a GET with a 2 s timeout took 38 s against a
    BMC sending a byte every 0.5 s, and the body was unbounded). The status line and headers are bounded by
    the same deadline through _Deadline, which also cuts a read that blocks past it."""
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            if time.monotonic() > deadline:
                raise TransportError(f"GET {path}: the answer was still arriving at the timeout ({size} bytes read)")
            chunk = response.raw.read1(CHUNK_BYTES)
            if not chunk:
                if time.monotonic() > deadline:  # cut short by the GET's _Deadline, not the body's end
                    raise TransportError(f"GET {path}: the answer was still arriving at the timeout ({size} bytes)")
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise RedfishError(f"GET {path}: the answer is larger than {MAX_BODY_BYTES} bytes: not read further")
            chunks.append(chunk)
    finally:
        response.close()


def _short(error: Exception) -> str:
    return str(error).replace("\n", " ")[:300]
