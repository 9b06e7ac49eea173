"""`fleetfix up --simulate N`: one process, embedded defaults, and within a
minute a person sees hosts, a remediation and a repair ticket."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.processes import FleetfixProcess, base_env, free_port, wait_until


def test_up_with_a_simulated_fleet_shows_a_ticket(tmp_path: Path) -> None:
    port = free_port()
    env = base_env(FLEETFIX_DATA_DIR=str(tmp_path / "data"), FLEETFIX_REPORT_INTERVAL_S="5")
    args = ["up", "--simulate", "30", "--sim-interval", "2", "--port", str(port)]
    with FleetfixProcess(args, env, tmp_path / "up.log") as up:
        base = f"http://127.0.0.1:{port}"

        def tickets() -> list[dict[str, object]] | None:
            try:
                return httpx.get(f"{base}/api/v1/tickets", timeout=2).json() or None
            except httpx.TransportError:
                return None

        found = wait_until(tickets, 60, "a ticket from the simulated fleet", up)
        assert found[0]["part_type"] == "dimm"
        assert found[0]["state"] == "open"
        hosts = httpx.get(f"{base}/api/v1/hosts").json()
        assert len(hosts) == 30
        assert {h["datacenter"] for h in hosts} == {"ams1", "sjc2", "fra3"}
        remediations = httpx.get(f"{base}/api/v1/remediations").json()
        assert any(r["state"] == "escalated" for r in remediations)
        page = httpx.get(f"{base}/").text
        assert f'href="/tickets/{found[0]["id"]}"' in page
        # the scheduler runs in the same process: its staleness check fires every report interval
        up.wait_for_output("Task remediator.mark_unreachable", timeout=30)
    assert (tmp_path / "data" / "fleetfix.db").exists()  # the embedded SQLite database
