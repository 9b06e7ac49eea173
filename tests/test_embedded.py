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
        # First start: an admin and an admin token, each printed once and kept in the data directory.
        token_file = tmp_path / "data" / "admin-token"
        wait_until(lambda: token_file.is_file() or None, 30, "the admin token file", up)
        token = token_file.read_text().strip()
        assert token in up.output()
        assert (tmp_path / "data" / "admin-password").read_text().strip() in up.output()
        # the start-up guide: where to look and as whom (api/embedded.py demo_guide)
        up.wait_for_output(f"open http://127.0.0.1:{port}/", timeout=30)
        up.wait_for_output("fleetfix:   sign in as tech-", timeout=5)
        up.wait_for_output("fleetfix:   sign in as operator, then ", timeout=5)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=5)

        def tickets() -> list[dict[str, object]] | None:
            try:
                found: list[dict[str, object]] = api.get("/api/v1/tickets").json()["items"]
                handed: list[dict[str, object]] = api.get("/api/v1/remediations").json()["items"]
            except httpx.TransportError:
                return None
            dimm = [t for t in found if t["part_type"] == "dimm"]  # the fleet's DIMMs fail first and most
            return dimm if dimm and any(r["state"] == "escalated" for r in handed) else None

        found = wait_until(tickets, 60, "a DIMM ticket from the simulated fleet", up)
        assert found[0]["state"] == "open"
        hosts = api.get("/api/v1/hosts").json()["items"]
        assert len(hosts) == 30
        assert {h["datacenter"] for h in hosts} == {"ams1", "sjc2", "fra3"}
        remediations = api.get("/api/v1/remediations").json()["items"]
        assert any(r["state"] == "escalated" for r in remediations)
        assert httpx.get(f"{base}/api/v1/hosts").status_code == 401
        page = api.get("/").text
        assert f'href="/tickets/{found[0]["id"]}"' in page
        # the scheduler runs in the same process: its staleness check fires every report interval
        up.wait_for_output("Task remediator.mark_unreachable", timeout=30)
    assert (tmp_path / "data" / "fleetfix.db").exists()  # the embedded SQLite database
