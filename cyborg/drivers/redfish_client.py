"""One Redfish session per BMC, through OpenStack's sushy, with every request in the action's command log.

sushy (Ironic's Redfish client) is used rather than hand-built HTTP: it speaks the schema's resources and
actions (ComputerSystem.Reset with its allowed values, Boot overrides, VirtualMedia insert/eject on the
System or the Manager, UpdateService.SimpleUpdate and its task monitor), authenticates with a
SessionService session where the BMC offers one and Basic auth where it does not (`SessionOrBasicAuth`),
logs in again when a session expired, and bounds its own retries. What it does not do, this module adds:
one client per BMC address kept and reused (a session costs the BMC a slot: many allow only a handful),
closed on `close()` (the session DELETEd); the password read from its file when a session is opened
(never an argument, never logged); TLS verified by default, against the configured CA bundle; and a
command-log record for each request — method, URL, status, the JSON body with every credential-like key
masked — through sushy's `response_callback`.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
import sushy
from requests import exceptions as requests_errors
from sushy import exceptions as sushy_errors
from sushy.auth import SessionOrBasicAuth
from sushy.connector import Connector

from cyborg.commands import ActionContext, ActionFailed, CommandRecord, excerpt

T = TypeVar("T")

SECRET_KEYS = ("password", "username", "token", "secret", "authorization")
"""JSON keys whose values never reach the command log (SessionService's UserName/Password, InsertMedia's)."""
RECORD_BODY_CHARS = 600
LOGOUT_TIMEOUT_S = 5.0
"""How long the session DELETE after a failed request may wait for its answer (our choice: the BMC just
failed a request, and the step is waiting)."""


def not_sent(ctx: ActionContext, method: str, what: str) -> None:
    """A change a dry run logs and does not send."""
    ctx.log.add(CommandRecord([method, what], None, "not sent (dry run)", kind="dry_run"))


class RedfishUnreachable(ActionFailed):
    """The BMC did not answer at all (refused, timed out, TLS failed): the only failure a host whose protocol
    is `both` takes to IPMI, and only while no change request was sent (cyborg/drivers/redfish.py,
    FallbackBmc). An answer that refuses (4xx/5xx) is a plain ActionFailed."""


class ChangeNotResent(requests_errors.RequestException):
    """A request that changes something (POST, PATCH, PUT, DELETE) failed in transit. sushy's connector resends
    on ReadTimeout and ConnectionError whatever the method (sushy 5.x `Connector._op`); a BMC that carried out a
    ComputerSystem.Reset and answered late would then cycle the host twice, a SimpleUpdate be submitted twice.
    This exception is not among the ones sushy retries: the change is tried once (review r5 finding 1)."""


class _OnceForChanges(requests.Session):
    """requests' Session whose change requests are never retried by sushy (see ChangeNotResent)."""

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        verb = method.decode() if isinstance(method, bytes) else method
        try:
            return super().request(verb, url, *args, **kwargs)
        except requests_errors.SSLError:
            raise  # sushy does not retry these
        except (requests_errors.ConnectionError, requests_errors.Timeout, requests_errors.ChunkedEncodingError) as e:
            if verb.upper() in ("GET", "HEAD"):
                raise
            raise ChangeNotResent(f"{e} (a {verb.upper()} is not resent: the BMC may have carried it out)") from e


class _Connector(Connector):  # type: ignore[misc]
    """sushy's Connector, with one attempt for any change request and a count of the change requests sent
    (`changes`, session logins and logouts apart): FallbackBmc asks IPMI only while it is zero."""

    def __init__(self, *args: Any, on_change: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        session = _OnceForChanges()
        plain: requests.Session = self._session
        session.headers.update(plain.headers)  # sushy's `Connection: close`
        plain.close()
        self._session: requests.Session = session
        self._on_change = on_change

    def _op(self, method: str, path: str = "", *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in ("GET", "HEAD") and "/SessionService/Sessions" not in path:
            self._on_change()  # counted before it is sent: a change that timed out may have been carried out
        return super()._op(method, path, *args, **kwargs)


@dataclass(frozen=True)
class RedfishConfig:
    username: str
    password_file: Path | None
    verify_tls: bool = True
    ca_file: Path | None = None
    system_id: str = ""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    retries: int = 2
    power_wait_s: float = 300.0
    cycle_off_wait_s: float = 30.0  # after a PowerCycle, how long the power is watched for leaving On (our choice)
    task_wait_s: float = 1800.0
    content_addressed: bool = True  # an image URL must name its SHA-256 in its path (redfish_media.check_image)
    poll_s: float = 1.0
    vanish_settle_s: float = 120.0
    """After a BIOS update's task monitor vanished: how long TaskService must list no running task and the BIOS
    version read the same before the update is called unverified (redfish_media._settle_vanished). Our choice:
    two minutes of nothing moving; wrong for a BMC that flashes longer than that and lists no task for it."""

    @property
    def verify(self) -> bool | str:
        """What requests takes: the CA bundle's path, or True (the system's CAs), or False (verify_tls off and
        no CA bundle). A CA bundle wins over verify_tls=False, as on the agent (checker/collectors/
        redfish_client.py): a configured bundle is always used (review r5 finding 15c)."""
        if self.ca_file:
            return str(self.ca_file)
        return self.verify_tls


def base_url(address: str) -> str:
    """https://ADDRESS: a bare address (host, host:port) is given https; plain http is refused, since Basic
    auth or the session login would carry the password in clear."""
    if "://" not in address:
        return f"https://{address}"
    if urlsplit(address).scheme != "https":
        scheme = urlsplit(address).scheme
        raise ActionFailed(f"Redfish over {scheme}:// is refused: the BMC login would travel in clear")
    return address.rstrip("/")


def shown(url: str) -> str:
    """`url` for logs and results: a query string (a pre-signed URL's token) is masked (review r5 15b)."""
    base, mark, _ = url.partition("?")
    return f"{base}?***" if mark else url


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "***"
            if k.lower().startswith(SECRET_KEYS)
            else shown(v)
            if k in ("ImageURI", "Image") and isinstance(v, str)
            else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def request_body(body: bytes | str | None) -> str:
    """A request's JSON body for the log, credentials masked; a body that is not JSON is never shown."""
    if not body:
        return ""
    try:
        return json.dumps(_masked(json.loads(body)), sort_keys=True)
    except ValueError:
        return f"({len(body)} bytes, not JSON: not shown)"


class RedfishClient:
    """sushy's root for one BMC, its auth and connector. Calls are serialised (`lock`): the command log the
    response callback writes into is the calling action's."""

    def __init__(self, address: str, config: RedfishConfig) -> None:
        self.address = address
        self.url = base_url(address)
        self.config = config
        self.lock = threading.RLock()
        self._ctx: ActionContext | None = None
        self._root: Any = None
        self._auth: Any = None
        self._connector: Any = None
        self.opened = 0  # sessions opened over this client's life: one, unless the BMC lost it
        self.changes = 0  # change requests (Reset, PATCH, InsertMedia, SimpleUpdate ...) sent over its life
        self._timeouts = (config.connect_timeout_s, config.read_timeout_s)  # (connect, read): _bound sets them
        self._secret = ""  # the password, as sushy's auth holds it too: only to redact it from the log
        self._retries = config.retries
        self._system_path: str | None = None
        self.retired = False  # evicted from its RedfishClients: a call still running closes it when done
        self.users = 0  # actions holding it (RedfishClients.using): never evicted while one does

    # -- the command log ------------------------------------------------------------------------

    def _record(self, response: Any) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        request = response.request
        body = request_body(request.body)
        reason = "" if response.ok else excerpt(response.text or "", 300)
        output = self._redacted("\n".join(part for part in (body, reason) if part))
        ctx.log.add(
            CommandRecord(
                [request.method, request.url],
                response.status_code,
                excerpt(output, RECORD_BODY_CHARS),
                kind="http",
                duration_s=response.elapsed.total_seconds(),
            )
        )

    def _redacted(self, text: str) -> str:
        """`text` with the password and the session token replaced by ***: a BMC's error answer may echo what
        it was sent (PropertyValueFormatError quotes the value), beyond the keys request_body masks (review
        r5 finding 15a)."""
        token = getattr(self._auth, "_session_key", None)
        for secret in (self._secret, token if isinstance(token, str) else ""):
            if secret and len(secret) >= 4:  # a shorter one would mask ordinary words
                text = text.replace(secret, "***")
        return text

    # -- the session ----------------------------------------------------------------------------

    def _password(self) -> str:
        path = self.config.password_file
        if path is None:
            return ""
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as error:
            raise ActionFailed(f"cannot read the BMC password file {path}: {error.strerror or error}") from None

    def _open(self) -> Any:
        self._connector = _Connector(
            self.url,
            on_change=self._changed,
            verify=self.config.verify,
            response_callback=self._record,
            server_side_retries=self._retries,
            server_side_retries_delay=1,
            default_request_timeout=self._timeouts[1],
            connect_timeout=self._timeouts[0],
        )
        self._secret = self._password()
        self._auth = SessionOrBasicAuth(username=self.config.username or None, password=self._secret or None)
        self._root = sushy.Sushy(self.url, auth=self._auth, connector=self._connector)
        # The session is ended by close() (and _forget), never by Sushy.__del__: a finaliser that runs during
        # garbage collection, does network I/O and logs its failure can run inside any other code (on
        # CPython 3.11.7 a nested ast.parse from the logged traceback broke an outer one: gh-106905).
        self._root._auth = None
        self.opened += 1
        return self._root

    def _changed(self) -> None:
        self.changes += 1

    def _bound(self, ctx: ActionContext) -> None:
        """Each request's timeouts within what is left of the action's budget (the probe's 45 s, a power
        wait's), and one attempt when retries would not fit: a hung BMC used to hold a call for
        retries x 60 s whatever the budget (review r5 finding 6). Read again before every call."""
        left = max(1.0, ctx.remaining())
        self._timeouts = (min(self.config.connect_timeout_s, left), min(self.config.read_timeout_s, left))
        fits = left >= self.config.retries * (self._timeouts[1] + 1)
        self._retries = self.config.retries if fits else 1
        if self._connector is not None:
            self._connector._connect_timeout, self._connector._default_request_timeout = self._timeouts
            self._connector._server_side_retries = self._retries

    def root(self) -> Any:
        return self._root if self._root is not None else self._open()

    def close(self, timeout_s: float | None = None) -> None:
        """Log out (DELETE the session, where one was opened; within `timeout_s` when given) and drop the
        connection pool."""
        with self.lock:
            auth, connector = self._auth, self._connector
            self._root = self._auth = self._connector = self._system_path = None
            try:
                if auth is not None:
                    if connector is not None and timeout_s is not None:
                        connector._default_request_timeout = timeout_s
                    auth.close()
            except sushy_errors.SushyError:
                pass  # the BMC forgot the session already: nothing more to close there
            finally:
                if connector is not None:
                    connector.close()

    # -- calls ----------------------------------------------------------------------------------

    def call(self, ctx: ActionContext, what: str, work: Callable[[Any], T]) -> T:
        """Run `work(root)` with this action's log attached, sushy's failures as ActionFailed saying `what`."""
        ctx.check_time()
        with self.lock:
            self._ctx = ctx
            try:
                self._bound(ctx)
                return work(self.root())
            except sushy_errors.ConnectionError as error:
                said = self._redacted(excerpt(str(error), 500))
                ctx.log.add(CommandRecord(["redfish", what, self.url], None, said, kind="http"))
                self._forget()
                raise RedfishUnreachable(f"{what}: the BMC at {self.url} did not answer ({_cause(error)})") from None
            except sushy_errors.AccessError as error:
                self._forget()
                refused = f"{what}: the BMC at {self.url} refused the credentials ({error.status_code})"
                raise ActionFailed(refused) from None
            except sushy_errors.HTTPError as error:
                said = self._redacted(str(error.detail))
                raise ActionFailed(f"{what}: the BMC answered {error.status_code}: {said}") from None
            except sushy_errors.SushyError as error:
                raise ActionFailed(f"{what}: {error}") from None
            finally:
                self._ctx = None
                if self.retired:  # evicted from RedfishClients while this call ran: its session ends now
                    self.close(LOGOUT_TIMEOUT_S)

    def _forget(self) -> None:
        """A BMC that did not answer, or refused the login, gets a new session next time. The old session is
        logged out first (DELETE, one attempt, LOGOUT_TIMEOUT_S): dropped without it, it held one of the BMC's
        few session slots until the BMC timed it out (review r5 finding 14)."""
        root, auth, connector = self._root, self._auth, self._connector
        self._root = self._auth = self._connector = self._system_path = None
        try:
            if auth is not None and connector is not None:
                connector._default_request_timeout = LOGOUT_TIMEOUT_S
                auth.close()
        except Exception as error:  # a BMC that does not answer cannot end it: it times out there
            ctx = self._ctx
            if ctx is not None:
                ctx.note("session not logged out", excerpt(str(error), 200))
        finally:
            if root is not None:
                root._auth = None  # sushy's Sushy.__del__ would try the DELETE again, on a closed connector
            if connector is not None:
                connector.close()

    def system(self, root: Any) -> Any:
        """The configured System, or the only member of /Systems (looked up once per session)."""
        if self._system_path is None:
            collection = root.get_system_collection()
            if self.config.system_id:
                self._system_path = f"{collection.path.rstrip('/')}/{self.config.system_id}"
            else:
                members = collection.members_identities
                if len(members) != 1:
                    raise ActionFailed(
                        f"the BMC at {self.url} manages {len(members)} systems: set FLEETFIX_REDFISH_SYSTEM_ID"
                    )
                self._system_path = members[0]
        return root.get_system(self._system_path)


def _retire(client: RedfishClient) -> threading.Thread | None:
    """Log an evicted client out: on a thread of its own (one DELETE within LOGOUT_TIMEOUT_S), so the caller
    that caused the eviction does not wait on another BMC, which may be hung (review r2 finding 7); or, when a
    call is running on it (its lock is held), when that call ends."""
    client.retired = True
    if not client.lock.acquire(blocking=False):  # (re-entrant: this very thread may be inside one of its calls)
        return None
    try:
        idle = client._ctx is None
    finally:
        client.lock.release()
    if not idle:
        return None
    logout = threading.Thread(
        target=client.close, args=(LOGOUT_TIMEOUT_S,), name=f"redfish-logout-{client.address}", daemon=True
    )
    logout.start()
    return logout


def _cause(error: Exception) -> str:
    text = str(error)
    for marker in ("Connection refused", "timed out", "CERTIFICATE_VERIFY_FAILED", "Name or service not known"):
        if marker in text:
            return marker.lower() if marker != "CERTIFICATE_VERIFY_FAILED" else "its TLS certificate did not verify"
    return excerpt(text, 200)


MAX_CLIENTS = 64
"""BMC sessions one process keeps at most (our choice): the least recently used beyond it is logged out. A
central worker that touched every BMC of a large fleet kept a session on each, holding one of each BMC's few
session slots (and a client here) until the BMC timed it out; 64 covers the BMCs a worker acts on at once
(its concurrency, far below) with room for the probes of silent hosts in between."""


class RedfishClients:
    """The clients of one process, one per BMC address, the `max_clients` most recently used kept until
    `close()`; a client evicted is logged out (its session DELETEd) once no call is running on it. A client an
    action holds (`using`: a power wait, a task's polls) is never evicted: evicted between two of its calls, it
    logged in and out for each, and a second action on that BMC got a second client, whose lock no longer
    serialised the two (review r2 finding 7). While every client beyond the cap is held, the cap is exceeded;
    the least recently used are evicted as soon as they are let go."""

    def __init__(self, config: RedfishConfig, max_clients: int = MAX_CLIENTS) -> None:
        self.config = config
        self.max_clients = max(1, max_clients)
        self._clients: OrderedDict[str, RedfishClient] = OrderedDict()
        self._lock = threading.Lock()
        self._logouts: list[threading.Thread] = []

    def get(self, address: str) -> RedfishClient:
        return self._checkout(address, 0)

    @contextmanager
    def using(self, address: str) -> Iterator[RedfishClient]:
        """The address's client, held (not evicted) until the block ends: one action's calls on one session."""
        client = self._checkout(address, 1)
        try:
            yield client
        finally:
            with self._lock:
                client.users -= 1
                evicted = self._evict(None)
            self._retire(evicted)

    def _checkout(self, address: str, hold: int) -> RedfishClient:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = self._clients[address] = RedfishClient(address, self.config)
            client.users += hold
            self._clients.move_to_end(address)
            evicted = self._evict(client)
        self._retire(evicted)
        return client

    def _evict(self, keep: RedfishClient | None) -> list[RedfishClient]:
        """The least recently used clients beyond the cap that no action holds (`keep`: the one being handed out)."""
        evicted = []
        for address, client in list(self._clients.items()):
            if len(self._clients) <= self.max_clients:
                break
            if client.users == 0 and client is not keep:
                evicted.append(self._clients.pop(address))
        return evicted

    def _retire(self, evicted: list[RedfishClient]) -> None:
        for old in evicted:
            if (logout := _retire(old)) is not None:
                self._logouts.append(logout)
        self._logouts = [t for t in self._logouts if t.is_alive()]

    def join_logouts(self, timeout_s: float = LOGOUT_TIMEOUT_S + 1) -> None:
        """Wait for evicted clients' logouts under way (at close(), and in tests)."""
        for logout in list(self._logouts):
            logout.join(timeout_s)

    def __len__(self) -> int:
        return len(self._clients)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            client.close()
        self.join_logouts()
