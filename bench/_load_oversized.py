"""The oversized-body flood of bench/load.py, over raw sockets: an abuser sends headers and never (or
slowly) the body, and each request is timed until its status line arrives."""

from __future__ import annotations

import asyncio
import random
import time
from urllib.parse import urlsplit

from bench._load_traffic import CLOSED_MID_BODY, Recorder


async def oversized(base: str, recorder: Recorder, rng: random.Random, host_token: str, limits: dict[str, int]) -> None:
    report = limits["report"]
    shape = rng.randrange(5)
    if shape == 0:  # a report over the intake cap, with a valid host credential: 413 before reading
        await _send(base, recorder, "big report", "/api/v1/reports", host_token, declared=report + 1)
    elif shape == 1:  # a 50 MB body with no credential: 413 before reading
        await _send(base, recorder, "big anonymous", "/api/v1/reports", None, declared=50 << 20)
    elif shape == 2:  # under the cap but anonymous: 401 before reading
        await _send(base, recorder, "anonymous body", "/api/v1/reports", None, declared=report - 1)
    elif shape == 3:  # chunked, with a valid credential: read up to the cap, then 413
        await _send(base, recorder, "big chunked report", "/api/v1/reports", host_token, declared=None)
    else:  # a sign-in form of 2 MiB: the CSRF check reads no more than 1 MiB
        await _send(base, recorder, "big login form", "/login", None, declared=2 << 20, form=True)


def _head(base: str, path: str, token: str | None, length: int | None, form: bool = False) -> bytes:
    host = urlsplit(base).netloc
    kind = "application/x-www-form-urlencoded" if form else "application/json"
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Type: {kind}", "Connection: close"]
    lines += ["X-Forwarded-Proto: https"]
    lines += [f"Authorization: Bearer {token}"] if token else []
    lines += [f"Content-Length: {length}"] if length is not None else ["Transfer-Encoding: chunked"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _status(reader: asyncio.StreamReader) -> int:
    line = await reader.readline()
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


CHUNK = 65536
MOST_SENT = 3 << 20  # past every cap: a sender stops there and waits for the answer


async def _send(
    base: str, recorder: Recorder, kind: str, path: str, token: str | None, *, declared: int | None, form: bool = False
) -> None:
    """Headers (declaring `declared` bytes, or chunked), then the body as fast as the server takes it,
    until it answers or the sender has sent more than any cap; timed until the status line arrives."""
    split = urlsplit(base)
    began = time.perf_counter()
    total = min(declared, MOST_SENT) if declared is not None else MOST_SENT
    payload = b"x" * CHUNK
    framed = b"%x\r\n" % CHUNK + payload + b"\r\n" if declared is None else payload
    try:
        reader, writer = await asyncio.open_connection(split.hostname, split.port)
    except OSError as error:
        recorder.add(kind, type(error).__name__, time.perf_counter() - began)
        return
    answer = asyncio.ensure_future(_status(reader))
    try:
        writer.write(_head(base, path, token, declared, form))
        if path.startswith("/api/") and declared is not None:
            # the API answers these before reading a byte (api/limits.py): give it a second to say so
            await asyncio.wait({answer}, timeout=1.0)
        sent = 0
        while not answer.done() and sent < total and not writer.is_closing():
            writer.write(framed)
            sent += CHUNK
            await writer.drain()
            await asyncio.sleep(0)
        cut_off = False
    except OSError:
        cut_off = True  # the server closed its side after answering: the answer is read below
    try:
        status: int | str = await asyncio.wait_for(answer, 60)
    except (OSError, TimeoutError) as error:
        # a server that answers and closes while the body is still coming makes its TCP send a reset,
        # which may discard the answer before the client reads it: refused, its status line lost
        closed = cut_off and isinstance(error, (ConnectionResetError, BrokenPipeError))
        status = CLOSED_MID_BODY if closed else type(error).__name__
    recorder.add(kind, status, time.perf_counter() - began)
    writer.close()
