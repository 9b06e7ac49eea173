"""Snapshots of a Redfish host (checker/snapshot_redfish.py): `fleetfix snapshot` records the redfish
collector's GETs against the local service (tests/checker/redfish_server.py, serving the real samples) into
DIR/redfish/, keeps no credential, token or BMC address, and `check --snapshot DIR` replays them to the same
report sections; a snapshot without DIR/redfish/ leaves the collector off, as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from api.cli import app as cli
from checker.collectors.base import SnapshotHost
from checker.collectors.context import CollectorState
from checker.collectors.redfish import RedfishCollector
from checker.collectors.redfish_client import RedfishSettings
from checker.cycle import run_cycle
from checker.schemas import Report
from checker.snapshot import capture
from checker.snapshot_redfish import INDEX, REPLAY_URL, replay_collectors
from tests.checker.redfish_server import DELL_SEL, PASSWORD, USER, RedfishService, dell

NO_HOST = SnapshotHost(Path("/nonexistent/fleetfix-empty-snapshot"))  # no files, no tools: only the BMC answers
CHASSIS = "/redfish/v1/Chassis/System.Embedded.1"
runner = CliRunner()


def settings_for(service: RedfishService, password_file: Path) -> RedfishSettings:
    return RedfishSettings(url=service.url, username=USER, password_file=password_file, max_entries=50)


def broken_parts(service: RedfishService) -> None:
    """Answers that are not a body: a Power link the BMC answers with 404, a System whose JSON is malformed."""
    chassis = service.resources[CHASSIS]
    assert isinstance(chassis, dict)
    chassis["Power"] = {"@odata.id": f"{CHASSIS}/Power"}  # not served: a 404
    service.resources["/redfish/v1/UpdateService/FirmwareInventory/Installed-0-1.2.3__BIOS.Setup.1-1"] = b"{oops"
    firmware = service.resources["/redfish/v1/UpdateService/FirmwareInventory"]
    assert isinstance(firmware, dict)
    firmware["Members"].append(
        {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/Installed-0-1.2.3__BIOS.Setup.1-1"}
    )
    firmware["Members@odata.count"] += 1


def bmc_sections(report: Report, service_url: str = "") -> dict[str, Any]:
    """What the redfish collector reported, without timing and the service address (a replay has none)."""
    doc = report.model_dump(mode="json")
    run = doc["collectors"]["redfish"]
    run.pop("duration_ms")
    run["problems"] = [p.replace(service_url, "") if service_url else p for p in run["problems"]]
    redfish = doc["observations"]["redfish"]
    redfish.pop("service")
    return {
        "run": run,
        "redfish": redfish,
        "sel": doc["observations"]["sel"],
        "sensors": doc["observations"]["sensors"],
    }


def every_file(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_capture_records_the_redfish_answers_and_the_replay_reports_the_same(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    broken_parts(service)
    settings = settings_for(service, password_file)
    live = run_cycle(
        NO_HOST, hostname="h", collectors={"redfish": RedfishCollector(settings, "redfish")}, state=CollectorState()
    )
    captured, recorder = capture(
        tmp_path / "snap", hostname="h", inner=NO_HOST, bmc_protocol="redfish", redfish_settings=settings
    )
    logins = [r for r in service.requests if r.method == "POST"]
    assert len(logins) == 2  # a Redfish session each, so there was a token to keep out
    assert captured.collectors["redfish"].status == "ok"
    assert any("Power not found" in p for p in captured.collectors["redfish"].problems)
    assert any("not JSON" in p for p in captured.collectors["redfish"].problems)
    assert bmc_sections(captured) == bmc_sections(live)  # recording changes nothing the collector sees

    index = json.loads((tmp_path / "snap/redfish" / INDEX).read_text())
    assert index["bmc_protocol"] == "redfish"
    assert index["settings"]["max_entries"] == 50
    resources = index["resources"]
    assert recorder.redfish_answers == len(resources) > 40
    assert resources["/redfish/v1/"]["status"] == 200
    assert resources[f"{CHASSIS}/Power"] == {
        "status": 404,
        "kind": "error",
        "error": resources[f"{CHASSIS}/Power"]["error"],
    }
    assert resources[DELL_SEL]["status"] == 200
    sel_body = json.loads((tmp_path / "snap/redfish" / resources[DELL_SEL]["file"]).read_text())
    assert len(sel_body["Members"]) == 16
    assert not any(path.startswith("/redfish/v1/SessionService") for path in resources)  # the login is not kept

    # Nothing secret and no BMC address anywhere in the snapshot.
    host_port = service.url.removeprefix("http://")
    for name, data in every_file(tmp_path / "snap").items():
        for secret in (PASSWORD, "token-1", "token-2", "X-Auth-Token", "Authorization", host_port):
            assert secret.encode() not in data, (name, secret)

    # The replay: no network, the same sections (the 404 and the malformed answer are the same problems).
    before = len(service.requests)
    collectors = replay_collectors(tmp_path / "snap")
    assert collectors is not None
    replayed = run_cycle(SnapshotHost(tmp_path / "snap"), hostname="h", collectors=collectors)
    assert len(service.requests) == before
    assert replayed.observations.redfish is not None
    assert replayed.observations.redfish.service == REPLAY_URL
    assert bmc_sections(replayed) == bmc_sections(captured, service.url)
    assert replayed.observations.sel is not None
    assert len(replayed.observations.sel.entries) == 16 + 50  # max_entries 50, as captured (the default is 200)
    assert replayed.collectors["sel"].status == "unavailable"  # bmc_protocol redfish, as captured


def test_an_answer_that_echoes_the_bmc_address_or_a_secret_is_kept_without_them(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    chassis = service.resources["/redfish/v1/Chassis"]
    assert isinstance(chassis, dict)
    chassis["Members"] = [{"@odata.id": f"{service.url}{CHASSIS}"}]  # an absolute link, as some BMCs give
    manager = service.resources["/redfish/v1/Managers/iDRAC.Embedded.1"]
    assert isinstance(manager, dict)
    manager["Description"] = f"login {USER}:{PASSWORD} at {service.url.removeprefix('http://').split(':')[0]}"
    settings = settings_for(service, password_file)
    captured, _ = capture(
        tmp_path / "snap", hostname="h", inner=NO_HOST, bmc_protocol="redfish", redfish_settings=settings
    )
    assert captured.observations.sensors  # the chassis was read through its absolute link
    files = every_file(tmp_path / "snap")
    assert not any(PASSWORD.encode() in data or b"127.0.0.1" in data for data in files.values())
    resources = json.loads(files["redfish/index.json"])["resources"]
    assert CHASSIS in resources  # the path without the service root
    manager_file = files[f"redfish/{resources['/redfish/v1/Managers/iDRAC.Embedded.1']['file']}"]
    assert json.loads(manager_file)["Description"] == f"login {USER}:<redacted> at <bmc>"
    collectors = replay_collectors(tmp_path / "snap")
    assert collectors is not None
    replayed = run_cycle(SnapshotHost(tmp_path / "snap"), hostname="h", collectors=collectors)
    assert replayed.observations.sensors == captured.observations.sensors  # the relative link replays


def test_a_path_not_recorded_replays_as_a_404(service: RedfishService, password_file: Path, tmp_path: Path) -> None:
    dell(service)
    capture(
        tmp_path / "snap",
        hostname="h",
        inner=NO_HOST,
        bmc_protocol="redfish",
        redfish_settings=settings_for(service, password_file),
    )
    path = tmp_path / "snap/redfish" / INDEX
    index = json.loads(path.read_text())
    del index["resources"][f"{CHASSIS}/Thermal"]
    path.write_text(json.dumps(index))
    collectors = replay_collectors(tmp_path / "snap")
    assert collectors is not None
    replayed = run_cycle(SnapshotHost(tmp_path / "snap"), hostname="h", collectors=collectors)
    run = replayed.collectors["redfish"]
    assert run.status == "ok"
    assert f"GET {CHASSIS}/Thermal: 404, not in the snapshot" in " ".join(run.problems)
    assert replayed.observations.sensors is None  # no chassis readings, as when a BMC answers 404
    assert replayed.observations.sel is not None  # the rest as captured


def cli_env(service: RedfishService, password_file: Path) -> dict[str, str]:
    return {
        "FLEETFIX_AGENT_BMC_PROTOCOL": "redfish",
        "FLEETFIX_AGENT_REDFISH_HTTP_HOST_INTERFACE": "true",
        "FLEETFIX_AGENT_REDFISH_URL": service.url,
        "FLEETFIX_AGENT_REDFISH_USERNAME": USER,
        "FLEETFIX_AGENT_REDFISH_PASSWORD_FILE": str(password_file),
        "FLEETFIX_AGENT_REDFISH_MAX_ENTRIES": "50",
    }


def test_snapshot_command_records_the_bmc_and_check_replays_it_anywhere(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    env = cli_env(service, password_file)
    live = runner.invoke(cli, ["check", "--format", "json"], env=env)
    assert live.exit_code == 0, live.output
    snap = tmp_path / "snap"
    result = runner.invoke(cli, ["snapshot", str(snap), "--hostname", "bmc-host"], env=env)
    assert result.exit_code == 0, result.output
    assert "Redfish answers" in result.output
    assert "redfish ok" in result.output
    assert not any(PASSWORD.encode() in data for data in every_file(snap).values())
    # replayed where the agent's settings say ipmi (the default): the snapshot's own protocol is used
    before = len(service.requests)
    replay = runner.invoke(cli, ["check", "--snapshot", str(snap), "--format", "json"], env={})
    assert replay.exit_code == 0, replay.output
    assert len(service.requests) == before
    first, again = Report.model_validate_json(live.output), Report.model_validate_json(replay.output)
    assert again.host.hostname == "bmc-host"
    assert again.collectors["redfish"].status == "ok"
    assert bmc_sections(again) == bmc_sections(first, service.url)


def test_a_snapshot_without_redfish_answers_leaves_the_collector_off(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    capture(tmp_path / "snap", hostname="h", inner=NO_HOST)  # bmc_protocol ipmi: nothing of the BMC's Redfish
    assert not (tmp_path / "snap/redfish").exists()
    assert replay_collectors(tmp_path / "snap") is None
    # even where this machine's agent is set to read a BMC over Redfish, the replay does not reach it
    replay = runner.invoke(
        cli, ["check", "--snapshot", str(tmp_path / "snap"), "--format", "json"], env=cli_env(service, password_file)
    )
    assert replay.exit_code == 0, replay.output
    report = Report.model_validate_json(replay.output)
    assert report.collectors["redfish"].status == "unavailable"
    assert report.observations.redfish is None
    assert service.requests == []


def test_under_both_the_replay_runs_ipmi_only_where_redfish_did_not_fill(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    service.resources["/redfish/v1/Chassis"] = {"@odata.id": "/redfish/v1/Chassis", "Members": []}  # no readings
    settings = settings_for(service, password_file)
    captured, _ = capture(
        tmp_path / "snap", hostname="h", inner=NO_HOST, bmc_protocol="both", redfish_settings=settings
    )
    collectors = replay_collectors(tmp_path / "snap")
    assert collectors is not None
    replayed = run_cycle(SnapshotHost(tmp_path / "snap"), hostname="h", collectors=collectors)
    statuses = {name: (run.status, run.reason) for name, run in replayed.collectors.items()}
    assert statuses == {name: (run.status, run.reason) for name, run in captured.collectors.items()}
    assert "read over Redfish this cycle" in (statuses["sel"][1] or "")  # the SEL came over Redfish
    assert "ipmitool is not installed" in (statuses["sensors"][1] or "")  # ipmi ran: no readings over Redfish
