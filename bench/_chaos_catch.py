"""Catching the central worker while it holds the run that would start a reboot, to kill -9 it then.

A `remediator.run_remediation` is in kombu's `unacked` hash for the ~50 ms the worker runs it, and
its step commits as `running` near the end. The bench's own threads share one interpreter lock with
the publisher, which spends seconds of CPU on each round's reports: polled from there, such a
window is missed. So the watch runs in a process of its own (multiprocessing, spawn): it reads
`unacked` every 2 ms; for each run_remediation it has not looked at yet it freezes the worker's
process group (SIGSTOP), reads the remediation's non-idempotent host steps, and then either
kills the group (SIGKILL: a reboot step is still `pending`, so the held run has not committed it)
or lets it go on (SIGCONT). A remediation without such a step is not looked at again. The freeze
lasts one query (a few ms) and changes nothing but timing.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time
from typing import Any

import orjson
import redis
from sqlalchemy import create_engine, text

from core.queue import HOST_QUEUE_PREFIX

STEPS = text(
    "SELECT index, action, state::text FROM remediation_steps WHERE remediation_id = :r AND action = ANY(:actions)"
)


def _held(client: redis.Redis) -> list[dict[str, Any]]:
    held = []
    for raw in client.hvals("unacked"):
        message, _exchange, routing_key = orjson.loads(raw)[:3]
        headers = message["headers"]
        held.append(
            {
                "task": headers.get("task"),
                "id": headers.get("id"),
                "args": str(headers.get("argsrepr", "")),
                "central": not str(routing_key).startswith(HOST_QUEUE_PREFIX),
            }
        )
    return held


def watch(broker_url: str, db_url: str, pgid: int, actions: list[str], timeout: float, out: Any) -> None:
    """The watch (see the module's docstring); sends what it did through the pipe `out`."""
    client = redis.Redis.from_url(broker_url)
    engine = create_engine(db_url, pool_size=1)
    looked: set[str] = set()
    plain: set[int] = set()
    stops, started, frozen = 0, time.monotonic(), False
    result: dict[str, Any] = {"caught": None}
    try:
        while time.monotonic() - started < timeout and result["caught"] is None:
            for task in _held(client):
                match = re.search(r"\d+", task["args"])
                if task["task"] != "remediator.run_remediation" or not task["central"] or match is None:
                    continue
                remediation = int(match.group())
                if task["id"] in looked or remediation in plain:
                    continue
                looked.add(task["id"])
                os.killpg(pgid, signal.SIGSTOP)
                frozen, stops = True, stops + 1
                try:
                    with engine.connect() as conn:
                        steps = conn.execute(STEPS, {"r": remediation, "actions": actions}).all()
                except Exception:  # the database is restarting: let the worker go on
                    steps = []
                pending = [s for s in steps if s[2] == "pending"]
                if pending:
                    held = [f"{t['task']}{t['args']}" for t in _held(client) if t["central"]]
                    os.killpg(pgid, signal.SIGKILL)
                    frozen = False
                    result = {"caught": remediation, "step": pending[0][0], "action": pending[0][1], "held": held}
                    result["at"] = time.time()
                    break
                if not steps:
                    plain.add(remediation)
                os.killpg(pgid, signal.SIGCONT)
                frozen = False
            time.sleep(0.002)
    finally:
        if frozen:  # never leave the worker stopped
            os.killpg(pgid, signal.SIGCONT)
        engine.dispose()
        out.send({**result, "stops": stops, "looked": len(looked), "waited": time.monotonic() - started})


def catch(broker_url: str, db_url: str, pgid: int, actions: list[str], timeout: float) -> dict[str, Any]:
    """Runs the watch in its own process and waits for it (up to `timeout` and a little)."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=watch, args=(broker_url, db_url, pgid, actions, timeout, send), daemon=True)
    process.start()
    result: dict[str, Any] = {"caught": None, "stops": 0, "looked": 0, "waited": timeout}
    if receive.poll(timeout + 60):
        result = receive.recv()
    process.join(10)
    return result
