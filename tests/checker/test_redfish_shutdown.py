"""The agent's Redfish session at its end (issue 19 item 4): stopping the agent mid-GET cuts the GET, ends
the session, and a cycle thread that outlives the stop opens no new one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from checker.collectors.context import CollectorState
from tests.checker.redfish_server import RedfishService, collection, skeleton
from tests.checker.test_redfish_collector import SMC_LOG, collector_for, cycle, generated


def test_stopping_mid_get_cuts_it_ends_the_session_and_opens_none_again(
    service: RedfishService, password_file: Path
) -> None:
    skeleton(service, systems={"1": {"logs": [SMC_LOG]}})
    service.add(collection(SMC_LOG, [], Members=generated(["1"], ["2024-01-01T00:00:00Z"])))
    service.hang, service.hang_s = {SMC_LOG}, 8.0
    collector = collector_for(service, password_file, timeout_s=10.0)
    done: list[float] = []

    def run() -> None:
        cycle(collector, CollectorState())
        done.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    while SMC_LOG not in service.gets():
        time.sleep(0.05)
    stopped = time.monotonic()
    collector.close()  # the agent's stop
    thread.join(timeout=20)
    assert done
    assert done[0] - stopped < 3  # the GET hanging for 8 s was cut, not waited for
    assert service.sessions == set()
    assert sum(1 for r in service.requests if r.method == "POST") == 1  # no session opened after the stop
    cycle(collector, CollectorState())  # a cycle after the stop opens none either
    assert sum(1 for r in service.requests if r.method == "POST") == 1
    assert service.sessions == set()
