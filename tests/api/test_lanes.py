"""Report intake keeps its share of a busy API process: other requests wait in a lane of their own."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from api.lanes import SharedLane, in_lane
from api.settings import load_central_settings


def test_only_intake_and_probes_skip_the_lane() -> None:
    def scope(method: str, path: str) -> dict[str, Any]:
        return {"type": "http", "method": method, "path": path}

    assert not in_lane(scope("POST", "/api/v1/reports"))
    assert not in_lane(scope("POST", "/api/v1/reports/batch/"))
    assert not in_lane(scope("GET", "/healthz"))
    assert in_lane(scope("GET", "/api/v1/reports"))  # reading reports is not intake
    assert in_lane(scope("POST", "/login"))
    assert in_lane(scope("GET", "/queue"))


def test_a_full_lane_holds_readers_but_not_intake_and_sheds_past_its_queue() -> None:
    """Two slow readers fill a lane of 2 with a queue of 1: a third waits, a fourth is refused 503 at once,
    and a report is served while the readers still hold the lane."""
    release = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["path"].encode()})

    settings = load_central_settings().model_copy(update={"api_shared_concurrency": 2, "api_shared_queue": 1})
    lane = SharedLane(app, settings)

    async def run() -> list[Any]:
        transport = httpx.ASGITransport(app=lane)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            readers = [asyncio.create_task(client.get("/slow")) for _ in range(3)]
            await asyncio.sleep(0.05)
            shed = await client.get("/slow")
            report = await asyncio.wait_for(client.post("/api/v1/reports"), 2)
            release.set()
            done = await asyncio.gather(*readers)
            return [shed, report, *done]

    shed, report, *readers = asyncio.run(run())
    assert shed.status_code == 503
    assert shed.headers["Retry-After"] == "1"
    assert report.status_code == 200
    assert [r.status_code for r in readers] == [200, 200, 200]


@pytest.mark.parametrize("size", [1, 3])
def test_the_lane_serves_at_most_its_size_at_once(size: int) -> None:
    running = 0
    peak = 0

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    settings = load_central_settings().model_copy(update={"api_shared_concurrency": size, "api_shared_queue": 100})
    lane = SharedLane(app, settings)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=lane), base_url="http://t") as client:
            await asyncio.gather(*(client.get("/queue") for _ in range(12)))

    asyncio.run(run())
    assert peak == size
