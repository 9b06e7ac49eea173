"""The clients of bench/load.py: report intake, the ticket queue and pages, and sign-ins (oversized bodies:
bench/_load_oversized.py).

Every request records its kind, status and latency. Open-loop senders time a request from when it was
due, not from when a free connection let it go, so a slow server cannot hide its queue (no coordinated
omission).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import multiprocessing
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from multiprocessing.connection import Connection
from urllib.parse import urlencode

import httpx

from checker.sim import SimulatedFleet

SESSION_COOKIE = "fleetfix_session"
CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')
PROXY = {"X-Forwarded-Proto": "https"}  # TLS ends at the proxy in front, as in production
CLOSED_MID_BODY = "closed mid-body"
"""The status of an oversized body whose answer a reset lost (bench/_load_oversized.py): refused, not an error."""


@dataclass
class Recorder:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, kind: str, status: int | str, seconds: float) -> None:
        self.latencies[kind].append(seconds)
        self.statuses[kind][str(status)] += 1

    def server_errors(self) -> int:
        return sum(n for counts in self.statuses.values() for status, n in counts.items() if status.startswith("5"))

    def transport_errors(self) -> int:
        return sum(
            n
            for counts in self.statuses.values()
            for status, n in counts.items()
            if not status.isdigit() and status != CLOSED_MID_BODY
        )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def client(base: str, connections: int) -> httpx.AsyncClient:
    """One shared client; cookies are carried by hand per signed-in person, never by the client's jar."""
    return httpx.AsyncClient(
        base_url=base,
        # uvicorn drops a connection idle 5 s: never reuse one that old (the close would race the request)
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=3),
        timeout=httpx.Timeout(120.0),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        follow_redirects=False,
    )


async def timed(recorder: Recorder, kind: str, send: Awaitable[httpx.Response], due: float | None = None) -> int:
    began = due if due is not None else time.perf_counter()
    try:
        response = await send
    except httpx.HTTPError as error:
        recorder.add(kind, type(error).__name__, time.perf_counter() - began)
        return 0
    recorder.add(kind, response.status_code, time.perf_counter() - began)
    return response.status_code


# -- reports -----------------------------------------------------------------------------------


class Reporter:
    """Hosts take turns; each posts its own report, captured now, with its own credential (the agent's
    HTTP fallback)."""

    def __init__(self, fleet: SimulatedFleet, tokens: dict[str, str]) -> None:
        self.fleet = fleet
        self.tokens = tokens
        self.next = 0

    def body(self) -> tuple[str, bytes]:
        host = self.fleet.hosts[self.next % len(self.fleet.hosts)]
        self.next += 1
        return host.hostname, host.report(dt.datetime.now(dt.UTC)).model_dump_json().encode()

    async def post(self, http: httpx.AsyncClient, recorder: Recorder, due: float | None = None) -> int:
        hostname, body = self.body()
        headers = {"Authorization": f"Bearer {self.tokens[hostname]}", "Content-Type": "application/json", **PROXY}
        return await timed(recorder, "report", http.post("/api/v1/reports", content=body, headers=headers), due)


# -- reads: the queue and the tickets ---------------------------------------------------------


@dataclass
class Catalogue:
    datacenters: list[str]
    racks: list[str]
    hostnames: list[str]
    ticket_ids: list[int]
    open_ticket_ids: list[int]


def queue_api_query(rng: random.Random, cat: Catalogue) -> dict[str, object]:
    """What dashboards and scripts ask the ticket list: open work by place, a host's history, old tickets."""
    shape = rng.randrange(6)
    if shape == 0:
        return {"open": "true", "datacenter": rng.choice(cat.datacenters)}
    if shape == 1:
        return {"state": "open", "priority": [1, 2], "limit": 50}
    if shape == 2:
        return {"hostname": rng.choice(cat.hostnames)}
    if shape == 3:
        return {
            "datacenter": rng.choice(cat.datacenters),
            "part_type": rng.choice(("dimm", "disk", "psu")),
            "limit": 200,
        }
    if shape == 4:
        return {"state": "closed", "min_age": "30d", "limit": 100}
    return {"rack": rng.choice(cat.racks)}


async def queue_api(
    http: httpx.AsyncClient, recorder: Recorder, token: str, rng: random.Random, cat: Catalogue
) -> None:
    """A filtered list and up to two more pages of it."""
    params: dict[str, object] = queue_api_query(rng, cat)
    headers = {"Authorization": f"Bearer {token}", **PROXY}
    for _ in range(3):
        began = time.perf_counter()
        try:
            response = await http.get("/api/v1/tickets", params=params, headers=headers)  # type: ignore[arg-type]
        except httpx.HTTPError as error:
            recorder.add("queue api", type(error).__name__, time.perf_counter() - began)
            return
        recorder.add("queue api", response.status_code, time.perf_counter() - began)
        cursor = response.json().get("next_cursor") if response.status_code == 200 else None
        if not cursor or rng.random() < 0.5:
            return
        params = {**params, "cursor": cursor}


async def ticket_api(
    http: httpx.AsyncClient, recorder: Recorder, token: str, rng: random.Random, cat: Catalogue
) -> None:
    ids = cat.open_ticket_ids if rng.random() < 0.7 else cat.ticket_ids
    headers = {"Authorization": f"Bearer {token}", **PROXY}
    await timed(recorder, "ticket api", http.get(f"/api/v1/tickets/{rng.choice(ids)}", headers=headers))


def queue_page_query(rng: random.Random, cat: Catalogue, datacenter: str) -> dict[str, str]:
    shape = rng.randrange(4)
    if shape == 0:
        return {}  # the technician's own datacenter, to do, most urgent first
    if shape == 1:
        return {"datacenter": "", "sort": "age"}
    if shape == 2:
        return {"datacenter": datacenter, "part_type": rng.choice(("dimm", "disk")), "priority": "2"}
    return {"datacenter": datacenter, "state": "verifying"}


async def queue_page(
    http: httpx.AsyncClient, recorder: Recorder, cookie: str, rng: random.Random, cat: Catalogue, dc: str
) -> None:
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}", **PROXY}
    query = queue_page_query(rng, cat, dc)
    await timed(recorder, "queue page", http.get("/queue?" + urlencode(query), headers=headers))


async def ticket_page(
    http: httpx.AsyncClient, recorder: Recorder, cookie: str, rng: random.Random, cat: Catalogue
) -> None:
    ids = cat.open_ticket_ids if rng.random() < 0.8 else cat.ticket_ids
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}", **PROXY}
    await timed(recorder, "ticket page", http.get(f"/tickets/{rng.choice(ids)}", headers=headers))


# -- signing in ------------------------------------------------------------------------------------


def session_cookie(response: httpx.Response) -> str | None:
    for header in response.headers.get_list("set-cookie"):
        name, _, rest = header.partition("=")
        if name.strip() == SESSION_COOKIE:
            return rest.split(";", 1)[0]
    return None


async def login_form(http: httpx.AsyncClient, recorder: Recorder, address: str) -> tuple[str, str] | None:
    """The anonymous session cookie and the form's CSRF token, as a browser gets them."""
    headers = {"X-Forwarded-For": address, **PROXY}
    began = time.perf_counter()
    try:
        response = await http.get("/login", headers=headers)
    except httpx.HTTPError as error:
        recorder.add("login form", type(error).__name__, time.perf_counter() - began)
        return None
    recorder.add("login form", response.status_code, time.perf_counter() - began)
    found = CSRF_FIELD.search(response.text)
    cookie = session_cookie(response)
    return (cookie, found.group(1)) if found and cookie else None


async def sign_in(
    http: httpx.AsyncClient,
    recorder: Recorder,
    kind: str,
    form: tuple[str, str],
    username: str,
    password: str,
    address: str,
) -> tuple[int, str | None]:
    cookie, csrf = form
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}", "X-Forwarded-For": address, **PROXY}
    data = {"username": username, "password": password, "csrf_token": csrf, "next": "/queue"}
    began = time.perf_counter()
    try:
        response = await http.post("/login", data=data, headers=headers)
    except httpx.HTTPError as error:
        recorder.add(kind, type(error).__name__, time.perf_counter() - began)
        return 0, None
    recorder.add(kind, response.status_code, time.perf_counter() - began)
    return response.status_code, session_cookie(response) if response.status_code == 303 else None


async def signed_in(http: httpx.AsyncClient, recorder: Recorder, username: str, password: str, address: str) -> str:
    form = await login_form(http, recorder, address)
    if form is None:
        raise RuntimeError("GET /login gave no form")
    status, cookie = await sign_in(http, recorder, "login ok", form, username, password, address)
    if cookie is None:
        raise RuntimeError(f"signing in as {username} gave {status}")
    return cookie


# -- load shapes -------------------------------------------------------------------------------------


async def closed_loop(tasks: int, until: float, step: Callable[[int], Awaitable[object]]) -> None:
    """`tasks` clients, each sending its next request as soon as its last one is answered."""

    async def one(index: int) -> None:
        while time.perf_counter() < until:
            await step(index)

    await asyncio.gather(*(one(i) for i in range(tasks)))


async def open_loop(rate: float, cap: int, until: float, step: Callable[[float], Awaitable[object]]) -> None:
    """Requests due at `rate` a second whatever the answers, at most `cap` in flight; each is timed from
    when it was due."""
    gate = asyncio.Semaphore(cap)
    running: set[asyncio.Task[None]] = set()
    interval = 1.0 / rate
    due = time.perf_counter()

    async def one(at: float) -> None:
        async with gate:
            await step(at)

    while due < until:
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        task = asyncio.ensure_future(one(due))
        running.add(task)
        task.add_done_callback(running.discard)
        due += interval
    if running:
        await asyncio.gather(*running)


# -- reports from a process of their own ------------------------------------------------------


def _reports_child(conn: Connection, reporter: Reporter, base: str, rate: float, cap: int, until: float) -> None:
    """In a forked process: the reports' open loop on a loop and client of its own; its recorder goes back."""
    asyncio.events._set_running_loop(None)  # forked from inside the parent's running loop

    async def run() -> Recorder:
        recorder = Recorder()
        async with client(base, cap) as http:
            await open_loop(rate, cap, until, lambda due: reporter.post(http, recorder, due))
        return recorder

    recorder = asyncio.run(run())
    conn.send(({k: list(v) for k, v in recorder.latencies.items()}, {k: dict(v) for k, v in recorder.statuses.items()}))
    conn.close()


async def reports_elsewhere(
    reporter: Reporter, base: str, rate: float, cap: int, until: float, recorder: Recorder
) -> None:
    """The reports' open loop in a forked process, so building the reports (a simulated host's report is
    milliseconds of CPU) and parsing the readers' pages never share one event loop: a report is late only
    if the service is. Monotonic time (perf_counter) is the machine's, so `until` and the due times hold
    across the fork."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_reports_child, args=(send, reporter, base, rate, cap, until), daemon=True)
    process.start()
    send.close()
    latencies, statuses = await asyncio.get_running_loop().run_in_executor(None, receive.recv)
    process.join(30)
    for kind, values in latencies.items():
        recorder.latencies[kind].extend(values)
    for kind, counts in statuses.items():
        recorder.statuses[kind].update(counts)
