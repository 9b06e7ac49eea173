"""The redfish collector in the agent: how it shares the BMC with the ipmi collectors (bmc_protocol), the
agent's settings for it, and the two entry points that build it (the check loop, `fleetfix check`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app as cli
from bench.samples import SnapshotBuilder, sample
from checker.agent.config import AgentConfig, AgentConfigError, load_agent_config
from checker.agent.worker import CheckLoop
from checker.collectors import ipmi
from checker.collectors.base import SnapshotHost
from checker.collectors.redfish_client import RedfishSettings
from checker.cycle import bmc_collectors, run_cycle
from checker.schemas import Report
from core.queue import create_celery
from tests.checker.redfish_server import USER, RedfishService, dell

NO_HOST = SnapshotHost(Path("/nonexistent/fleetfix-empty-snapshot"))  # no files, no tools: only the BMC answers


# -- how Redfish and IPMI share the BMC -------------------------------------------------------------


def ipmi_snapshot(tmp_path: Path) -> SnapshotBuilder:
    snap = SnapshotBuilder(tmp_path / "snap").command(
        ipmi.IPMITOOL_INFO, sample("ipmi-sel/ipmitool-sel-info-545-entries.txt")
    )
    return snap.command(
        ipmi.IPMITOOL_ELIST, sample("ipmi-sel/ipmitool-sel-list-correctable-ecc-cpu0-dimm8-chassis-intrusion.txt")
    )


def only_bmc(collectors: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in collectors.items() if k in ("redfish", "sel")}


def test_both_prefers_redfish_and_falls_back_to_ipmi(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    snap = ipmi_snapshot(tmp_path)
    settings = RedfishSettings(url=service.url, username=USER, password_file=password_file, max_entries=50)
    collectors = only_bmc(bmc_collectors("both", settings))
    assert list(collectors) == ["redfish", "sel"]  # Redfish first
    report = run_cycle(snap.host(), hostname="h", collectors=collectors)
    assert report.collectors["sel"].status == "unavailable"
    assert "read over Redfish" in (report.collectors["sel"].reason or "")
    assert report.observations.sel is not None
    assert report.observations.sel.entries[0].log_service is not None
    down = RedfishSettings(url="http://127.0.0.1:9", username=USER, password_file=password_file, timeout_s=0.5)
    fallback = run_cycle(snap.host(), hostname="h", collectors=only_bmc(bmc_collectors("both", down)))
    assert fallback.collectors["redfish"].status == "unavailable"
    assert (fallback.collectors["sel"].status, fallback.collectors["sel"].source) == ("ok", "ipmitool")
    assert fallback.observations.sel is not None
    assert fallback.observations.sel.entries[0].log_service is None


def test_protocol_ipmi_and_redfish_alone(service: RedfishService, password_file: Path, tmp_path: Path) -> None:
    snap = ipmi_snapshot(tmp_path)
    assert "redfish" not in bmc_collectors("ipmi", None)
    ipmi_only = run_cycle(snap.host(), hostname="h", collectors=only_bmc(bmc_collectors("ipmi", None)))
    assert ipmi_only.collectors["sel"].status == "ok"
    settings = RedfishSettings(url=service.url, username=USER, password_file=password_file)
    down = run_cycle(snap.host(), hostname="h", collectors=only_bmc(bmc_collectors("redfish", settings)))
    # redfish alone: the ipmi collectors never fill the section, even when the BMC's Redfish is down
    assert down.collectors["sel"].status == "unavailable"
    assert down.observations.sel is None
    with pytest.raises(ValueError, match="not one of"):
        bmc_collectors("snmp", None)


# -- the agent's settings and its two entry points ----------------------------------------------------


def test_settings_refuse_what_cannot_work(tmp_path: Path, password_file: Path) -> None:
    with pytest.raises(AgentConfigError, match=r"REDFISH_URL: .*needed with FLEETFIX_AGENT_BMC_PROTOCOL=both"):
        load_agent_config(bmc_protocol="both")
    with pytest.raises(AgentConfigError, match="must not carry credentials"):
        load_agent_config(bmc_protocol="redfish", redfish_url="https://root:calvin@10.0.0.5")
    # Review r5 finding 13: plain http only behind the opt-in, and only to a link-local or loopback address.
    with pytest.raises(AgentConfigError, match=r"REDFISH_URL: .*http:// is refused"):
        load_agent_config(bmc_protocol="redfish", redfish_url="http://10.0.0.5")
    with pytest.raises(AgentConfigError, match=r"REDFISH_URL: .*http:// is refused"):
        load_agent_config(bmc_protocol="redfish", redfish_url="http://169.254.0.17")
    with pytest.raises(AgentConfigError, match=r"REDFISH_URL: .*http:// is refused"):
        load_agent_config(bmc_protocol="redfish", redfish_url="http://10.0.0.5", redfish_http_host_interface=True)
    host_interface = load_agent_config(
        bmc_protocol="redfish", redfish_url="http://169.254.0.17", redfish_http_host_interface=True
    )
    assert host_interface.redfish_url == "http://169.254.0.17"
    with pytest.raises(AgentConfigError, match=r"REDFISH_PASSWORD_FILE: .*not a readable file"):
        load_agent_config(redfish_url="https://10.0.0.5", redfish_password_file=tmp_path / "missing")
    assert load_agent_config().redfish_settings is None
    config = load_agent_config(
        bmc_protocol="both",
        redfish_url="https://10.0.0.5:8443/",
        redfish_username=USER,
        redfish_password_file=password_file,
    )
    settings = config.redfish_settings
    assert settings is not None
    assert (settings.url, settings.service, settings.verify_tls, settings.password_file) == (
        "https://10.0.0.5:8443",
        "https://10.0.0.5:8443",
        True,
        password_file,
    )
    assert load_agent_config(collector_timeouts={"redfish": 90}).collector_timeouts == {"redfish": 90}


def test_the_agent_loop_keeps_one_session_and_ends_it(
    service: RedfishService, password_file: Path, tmp_path: Path
) -> None:
    dell(service)
    config = AgentConfig(
        state_dir=tmp_path / "state",
        benchmark_window="",
        bmc_protocol="redfish",
        redfish_http_host_interface=True,  # our test service speaks http on 127.0.0.1
        redfish_url=service.url,
        redfish_username=USER,
        redfish_password_file=password_file,
        redfish_max_entries=50,
    )
    loop = CheckLoop(create_celery("redis://127.0.0.1:1/0", make_current=False), "rf-1", 60, config, host=NO_HOST)
    try:
        first = loop.build()
        loop.cursors.commit()
        second = loop.build()
    finally:
        loop.stop()
    assert first is not None
    assert second is not None
    assert first.collectors["redfish"].status == "ok"
    assert first.collectors["sel"].status == "unavailable"
    assert first.observations.sel is not None
    assert len(first.observations.sel.entries) == 66
    assert second.observations.sel is not None
    assert second.observations.sel.entries == []
    assert [r.method for r in service.requests].count("POST") == 1
    assert [r.method for r in service.requests][-1] == "DELETE"  # stop() ended the BMC session


def test_fleetfix_check_reads_the_bmc_over_redfish(service: RedfishService, password_file: Path) -> None:
    dell(service)
    env = {
        "FLEETFIX_AGENT_BMC_PROTOCOL": "redfish",
        "FLEETFIX_AGENT_REDFISH_HTTP_HOST_INTERFACE": "true",
        "FLEETFIX_AGENT_REDFISH_URL": service.url,
        "FLEETFIX_AGENT_REDFISH_USERNAME": USER,
        "FLEETFIX_AGENT_REDFISH_PASSWORD_FILE": str(password_file),
        "FLEETFIX_AGENT_REDFISH_MAX_ENTRIES": "50",
    }
    result = CliRunner().invoke(cli, ["check", "--format", "json"], env=env)
    assert result.exit_code == 0, result.output
    report = Report.model_validate_json(result.output)
    assert report.collectors["redfish"].status == "ok"
    assert report.collectors["sel"].status == "unavailable"
    assert report.observations.redfish is not None
    assert report.observations.redfish.service == service.url
    assert [r.method for r in service.requests][-1] == "DELETE"
