"""Report intake keeps its share of a busy API process.

Agents' reports come through the broker as a rule; through the API they are the fallback, and the
same process serves people: the ticket queue, host pages, sign-ins (a quarter of a second of CPU
each). On a small box a crowd of readers or a sign-in flood took every thread and database
connection, and report intake waited seconds behind them (bench/load.py). So every request that is
not report intake or a probe runs in a lane of `api_shared_concurrency` requests at a time per
process; the rest wait in the event loop, holding no thread and no connection, and past
`api_shared_queue` waiting they are answered 503 with a Retry-After at once. Report intake
(`POST /api/v1/reports`, `/api/v1/reports/delta`, `/api/v1/reports/batch`) and the probes (`/healthz`, `/readyz`,
`/metrics`) never wait in the lane.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_body
from core.settings import Settings

INTAKE = frozenset({"/api/v1/reports", "/api/v1/reports/delta", "/api/v1/reports/batch"})
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


def in_lane(scope: Scope) -> bool:
    """Whether a request waits its turn in the shared lane (everything but intake and the probes)."""
    path = scope["path"].rstrip("/") or "/"
    if path in PROBES:
        return False
    return not (scope["method"] == "POST" and path in INTAKE)


class _Lane:
    def __init__(self, size: int) -> None:
        self.slots = asyncio.Semaphore(size)
        self.waiting = 0


class SharedLane:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.size = settings.api_shared_concurrency
        self.queue = settings.api_shared_queue
        # one lane per event loop (a process serves one; tests start several)
        self._lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lane] = weakref.WeakKeyDictionary()

    def _lane(self) -> _Lane:
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is None:
            lane = self._lanes[loop] = _Lane(self.size)
        return lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not in_lane(scope):
            await self.app(scope, receive, send)
            return
        lane = self._lane()
        if lane.slots.locked() and lane.waiting >= self.queue:
            body = error_body("busy", f"the service is busy: {lane.waiting} requests wait; try again in 1 s")
            await JSONResponse(body, status_code=503, headers={"Retry-After": "1"})(scope, receive, send)
            return
        lane.waiting += 1
        try:
            await lane.slots.acquire()
        finally:
            lane.waiting -= 1
        try:
            await self.app(scope, receive, send)
        finally:
            lane.slots.release()


def install(app: Any, settings: Settings) -> None:
    """Outermost but for the front door's checks: a request waits here before anything else is done for it."""
    app.add_middleware(SharedLane, settings=settings)
