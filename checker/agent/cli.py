"""The `fleetfix-agent` command: what a host runs, and all it installs (deploy/agent/).

`fleetfix-agent run` is the agent; `check`, `snapshot` and `report-schema` are the host side's
one-off tools. The full `fleetfix` command carries the same commands under their old names
(`fleetfix agent` is `fleetfix-agent run`). Each command imports what it runs only when it runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from core.logs import mask_credentials
from core.settings import Settings, SettingsError, load_settings

app = typer.Typer(
    name="fleetfix-agent",
    help="The fleetfix host agent: check this host's hardware, report it centrally, run the actions the service signs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(ctx: typer.Context, message: str, code: int = 2) -> typer.Exit:
    program = ctx.find_root().command.name or "fleetfix-agent"  # `fleetfix` when run as its alias
    typer.echo(f"{program}: {mask_credentials(message)}", err=True)
    return typer.Exit(code)


def _settings(ctx: typer.Context) -> Settings:
    try:
        settings = load_settings(Settings)  # the shared section: the agent reads no stage's
    except SettingsError as error:
        raise _fail(ctx, f"bad setting: {error}") from None
    from core.logs import setup_logging

    setup_logging(settings.log_level, settings.log_format)
    return settings


def run(
    ctx: typer.Context,
    hostname: Annotated[
        str | None, typer.Option(help="This host's name (default FLEETFIX_HOSTNAME or the system's).")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="Cursors and spool directory (default FLEETFIX_AGENT_STATE_DIR).")
    ] = None,
) -> None:
    """Run the host agent: a Celery worker on host.<hostname> that also runs the check cycle."""
    settings = _settings(ctx)
    from checker.agent.config import AgentConfigError, load_agent_config
    from checker.agent.worker import AgentStartError, run_agent

    try:
        config = load_agent_config(**({"state_dir": state_dir} if state_dir is not None else {}))
        run_agent(settings, hostname=hostname, loglevel=settings.log_level, config=config)
    except AgentConfigError as error:
        raise _fail(ctx, f"bad setting: {error}") from None
    except AgentStartError as error:
        raise _fail(ctx, str(error), 1) from None


def _print_report(report: object, output_format: str) -> None:
    from checker.schemas import Report

    assert isinstance(report, Report)
    if output_format == "json":
        typer.echo(report.model_dump_json(indent=2))
        return
    typer.echo(f"{report.host.hostname} at {report.captured_at.isoformat()}")
    for name, collector in report.collectors.items():
        reason = f" — {collector.reason}" if collector.reason else ""
        source = f" [{collector.source}]" if collector.source else ""
        typer.echo(f"  {name:<12} {collector.status.value:<12} {collector.duration_ms:8.1f} ms{source}{reason}")
        for item in collector.problems:
            typer.echo(f"  {'':<12} ! {item}")


def check(
    ctx: typer.Context,
    snapshot: Annotated[Path | None, typer.Option(help="Read a snapshot directory instead of this host.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="json or text.")] = "text",
    hostname: Annotated[str | None, typer.Option(help="Hostname to report as.")] = None,
) -> None:
    """Run every collector once and print the report (nothing is sent, no agent cursor moves)."""
    from checker.agent.config import AgentConfigError, load_agent_config
    from checker.collectors.base import HostAccess, LiveHost, SnapshotHost
    from checker.cycle import bmc_collectors, run_cycle
    from checker.snapshot import SnapshotError, read_meta
    from checker.snapshot_redfish import replay_collectors

    if output_format not in ("json", "text"):
        raise _fail(ctx, f"--format must be json or text, not {output_format!r}")
    try:
        config = load_agent_config()
    except AgentConfigError as error:
        raise _fail(ctx, f"bad setting: {error}") from None
    access: HostAccess
    replayed = None
    if snapshot is not None:
        if not snapshot.is_dir():
            raise _fail(ctx, f"--snapshot {snapshot}: not a directory")
        try:
            meta = read_meta(snapshot)
            replayed = replay_collectors(snapshot)  # the BMC's Redfish answers, when it holds them
        except SnapshotError as error:
            raise _fail(ctx, str(error)) from None
        if hostname is None and isinstance(meta.get("hostname"), str):
            hostname = meta["hostname"]
        access = SnapshotHost(snapshot)
    else:
        access = LiveHost()
    collectors = replayed or bmc_collectors(config.bmc_protocol, config.redfish_settings if snapshot is None else None)
    try:
        report = run_cycle(
            access,
            hostname=hostname,
            collectors=collectors,
            timeout_s=config.collector_timeout_s,
            timeouts=config.collector_timeouts,
            max_report_bytes=config.max_report_bytes,
        )
    finally:  # whatever ended the run (an interrupt, an error): the BMC session is ended
        if (redfish := collectors.get("redfish")) is not None and hasattr(redfish, "close"):
            redfish.close()
    _print_report(report, output_format)


def snapshot(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="New or empty directory to write the snapshot into.")],
    hostname: Annotated[str | None, typer.Option(help="Hostname to record (default: the system's).")] = None,
) -> None:
    """Capture everything the collectors read on this host (and its BMC's Redfish answers, under
    bmc_protocol redfish or both; never its credentials) into DIR, for `check --snapshot DIR`."""
    from checker.agent.config import AgentConfigError, load_agent_config
    from checker.snapshot import SnapshotError, capture
    from core.progress import tracked

    try:
        config = load_agent_config()
        with tracked(f"capturing a snapshot into {directory}"):  # a spinner: collectors run in parallel
            report, recorder = capture(
                directory,
                hostname=hostname,
                timeout_s=config.collector_timeout_s,
                timeouts=config.collector_timeouts,
                bmc_protocol=config.bmc_protocol,
                redfish_settings=config.redfish_settings,
            )
    except AgentConfigError as error:
        raise _fail(ctx, f"bad setting: {error}") from None
    except SnapshotError as error:
        raise _fail(ctx, str(error)) from None
    statuses = ", ".join(f"{name} {collector.status.value}" for name, collector in report.collectors.items())
    typer.echo(
        f"snapshot of {report.host.hostname} in {directory}: {recorder.files_written} files, "
        f"{len(recorder.commands)} commands"
        + (f", {recorder.redfish_answers} Redfish answers" if recorder.redfish_answers else "")
        + f" ({statuses})"
    )


def report_schema(
    delta: Annotated[bool, typer.Option("--delta", help="The delta report's envelope (checker/wire.py).")] = False,
) -> None:
    """Print the JSON Schema of the host report (the agent-to-service contract)."""
    from checker.schemas import Report
    from checker.wire import ReportDelta

    typer.echo(json.dumps((ReportDelta if delta else Report).model_json_schema(), indent=2))


app.command("run")(run)
app.command("check")(check)
app.command("snapshot")(snapshot)
app.command("report-schema")(report_schema)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
