"""The `fleetfix` command.

It is the outermost layer, so it lives beside the API (nothing imports either).
Each command imports what it runs only when it runs. The host side's commands
(`agent`, `check`, `snapshot`, `report-schema`) are those of `fleetfix-agent`
(checker/agent/cli.py), which is what hosts install; here they keep their names.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from api.cli_users import tokens_app, users_app
from api.settings import CentralSettings, load_central_settings
from checker.agent import cli as agent_cli
from core.logs import mask_credentials
from core.settings import SettingsError

app = typer.Typer(
    name="fleetfix",
    help="Fleet auto-remediation: find hardware faults on every host, fix what software can, ticket the rest.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
rules_app = typer.Typer(help="Rule packs.", no_args_is_help=True)
hosts_app = typer.Typer(help="Host inventory.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(rules_app, name="rules")
app.add_typer(hosts_app, name="hosts")
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")
keys_app = typer.Typer(help="The key that signs host action envelopes (docs/cyborg.md).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"fleetfix: {mask_credentials(message)}", err=True)
    return typer.Exit(code)


def _settings(**overrides: object) -> CentralSettings:
    try:
        settings = load_central_settings(**overrides)
    except SettingsError as error:
        raise _fail(f"bad setting: {error}") from None
    from core.logs import setup_logging

    setup_logging(settings.log_level, settings.log_format)
    return settings


def _central(settings: CentralSettings, datacenter: str | None = None) -> CentralSettings:
    """Settings of a central process: on its datacenter's broker if one is named, metrics shared on the box."""
    if datacenter is not None:
        if datacenter not in settings.datacenter_brokers:
            known = ", ".join(sorted(settings.datacenter_brokers)) or "none"
            raise _fail(f"--datacenter {datacenter}: FLEETFIX_DATACENTER_BROKERS names no such datacenter ({known})")
        settings = settings.model_copy(update={"broker_url": settings.datacenter_brokers[datacenter]})
    # prometheus_client picks multiprocess mode from this variable when the first metric is made,
    # so it is set before the command imports what counts (core.metrics).
    settings.effective_metrics_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.effective_metrics_dir.resolve()))
    return settings


def _serve_metrics(settings: CentralSettings) -> None:
    if settings.metrics_port:
        from core import metrics

        metrics.serve(settings.metrics_port)


@app.command()
def up(
    simulate: Annotated[int, typer.Option(help="Also run a simulated fleet of this many virtual hosts.", min=0)] = 0,
    sim_interval: Annotated[float, typer.Option(help="Seconds between the simulated hosts' reports.", min=0.5)] = 5.0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated fleet (same seed, same faults).")] = 1,
    host: Annotated[str | None, typer.Option(help="Listen address (default FLEETFIX_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default FLEETFIX_API_PORT).")] = None,
) -> None:
    """Run everything in one process: API, web UI, worker, scheduler (embedded default: SQLite, in-process broker)."""
    overrides: dict[str, object] = {}
    if host:
        overrides["api_host"] = host
    if port:
        overrides["api_port"] = port
    settings = _central(_settings(**overrides))
    if not settings.embedded:
        raise _fail("`up` runs on the in-process broker; unset FLEETFIX_BROKER_URL, or run api/worker/scheduler")
    from api.embedded import run_up

    database = mask_credentials(settings.effective_database_url)
    typer.echo(f"fleetfix: UI and API on {settings.effective_public_url} (database {database})")
    run_up(settings, simulate=simulate, sim_interval=sim_interval, seed=seed)


@app.command()
def api(
    workers: Annotated[int, typer.Option(help="uvicorn worker processes.", min=1)] = 1,
) -> None:
    """Serve the REST API and web UI (production: PostgreSQL, a real broker, an https PUBLIC_URL)."""
    settings = _central(_settings())
    if settings.environment == "production" and not settings.effective_public_url.startswith("https://"):
        raise _fail(
            "FLEETFIX_PUBLIC_URL must be the https:// address people reach the UI at in production (behind a "
            "proxy that ends TLS, the proxy's https address): the session cookie is sent only over https"
        )
    import uvicorn

    uvicorn.run(
        "api.server:app",
        host=settings.api_host,
        port=settings.api_port,
        workers=workers,
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's logs go through fleetfix's handler (JSON in production)
    )


@app.command()
def worker(
    queues: Annotated[str, typer.Option(help="Comma-separated queues to consume.")] = "ingest,remediate,notify",
    concurrency: Annotated[int, typer.Option(help="Worker processes.", min=1)] = 2,
    prefetch: Annotated[
        int | None,
        typer.Option(
            help="Messages reserved per process. Default: the ingest batch size if it consumes ingest, else 1."
        ),
    ] = None,
    datacenter: Annotated[
        str | None, typer.Option(help="Consume this datacenter's broker (FLEETFIX_DATACENTER_BROKERS) instead.")
    ] = None,
) -> None:
    """Run a central Celery worker (ingest, remediate, notify queues)."""
    settings = _central(_settings(), datacenter)
    from api.runtime import build_central
    from remediator.tasks import INGEST_BATCH

    if prefetch is None:
        prefetch = INGEST_BATCH if "ingest" in queues.split(",") else 1
    celery_app = build_central(settings, runs_actions=True).celery  # a worker carries out every action
    from core.process import tune_gc

    tune_gc()  # before the pool forks: the children inherit the frozen heap and the thresholds
    _serve_metrics(settings)
    from core import metrics

    metrics.watch_worker_tasks()  # fleetfix_worker_last_task_timestamp_seconds: the "workers down" alert
    celery_app.worker_main(
        [
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "--prefetch-multiplier",
            str(prefetch),
            "-l",
            settings.log_level,
            "--without-gossip",
        ]
    )


@app.command()
def ingester(
    batch: Annotated[int, typer.Option(help="Reports per transaction at most.", min=1, max=5000)] = 500,
    datacenter: Annotated[
        str | None, typer.Option(help="Read this datacenter's broker (FLEETFIX_DATACENTER_BROKERS) instead.")
    ] = None,
) -> None:
    """Consume agents' reports from the Redis ingest stream, a batch per transaction (run one per core)."""
    settings = _central(_settings(), datacenter)
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        raise _fail(
            "the ingest stream needs a Redis broker (FLEETFIX_BROKER_URL=redis://…); agents on other "
            "brokers send Celery tasks that `fleetfix worker` consumes"
        )
    import signal

    from api.runtime import build_central
    from remediator.stream import StreamIngester

    runtime = build_central(settings)
    consumer = StreamIngester(
        settings.broker_url,
        runtime.database,
        runtime.remediator.rules,
        batch=batch,
        require_signed=settings.signed_reports_required,
        tls=settings.broker_tls,
    )
    from core.process import tune_gc

    tune_gc()
    _serve_metrics(settings)
    signal.signal(signal.SIGTERM, lambda *_: consumer.stop())
    signal.signal(signal.SIGINT, lambda *_: consumer.stop())
    consumer.run()


@app.command()
def scheduler() -> None:
    """Run the periodic-task scheduler (Celery beat): staleness checks and other timers."""
    settings = _central(_settings())
    from api.runtime import build_central

    celery_app = build_central(settings).celery
    _serve_metrics(settings)
    quiet = ["--quiet"] if settings.log_format == "json" else []  # no free-text banner among JSON lines
    celery_app.start([*quiet, "beat", "-l", settings.log_level, "-s", str(settings.data_dir / "celerybeat-schedule")])


# The host side's commands are the `fleetfix-agent` command's own (checker/agent/cli.py), under their
# names of before it existed: `fleetfix agent` is `fleetfix-agent run`.
app.command("agent")(agent_cli.run)
app.command("check")(agent_cli.check)
app.command("snapshot")(agent_cli.snapshot)
app.command("report-schema")(agent_cli.report_schema)


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision (heads: every branch).")] = "heads",
) -> None:
    """Apply database migrations (creates the schema on an empty database)."""
    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from migrations import upgrade

    upgrade(settings.effective_database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("check")
def db_check() -> None:
    """Fail if the database schema and the models differ."""
    settings = _settings()
    from alembic.util.exc import AutogenerateDiffsDetected

    from migrations import check as alembic_check

    try:
        alembic_check(settings.effective_database_url)
    except AutogenerateDiffsDetected as error:
        raise _fail(str(error), 1) from None
    typer.echo("schema matches the models")


@db_app.command("prune")
def db_prune(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would go; change nothing.")] = False,
    days: Annotated[
        int | None, typer.Option(min=1, help="Keep this many days (default FLEETFIX_REPORT_RETENTION_DAYS).")
    ] = None,
) -> None:
    """Create the coming days' report partitions and prune raw reports and signals past the retention window."""
    settings = _settings()
    from core.db import Database, utcnow
    from core.progress import tracked
    from remediator import retention

    database = Database(settings.effective_database_url, pool_size=1)
    with tracked("pruning") as progress:
        pruned = retention.maintain(
            database,
            now=utcnow(),
            retention_days=days or settings.report_retention_days,
            dry_run=dry_run,
            on_stage=progress.stage,
        )
    verb = "would" if dry_run else "did"
    typer.echo(f"cutoff {pruned.cutoff.isoformat()} ({verb}):")
    typer.echo(f"  partitions created: {', '.join(pruned.partitions_created) or 'none'}")
    typer.echo(f"  partitions dropped: {', '.join(pruned.partitions_dropped) or 'none'}")
    typer.echo(f"  report rows deleted: {pruned.rows_deleted}; signals deleted: {pruned.signals_deleted}")
    counts = (
        f"{len(pruned.partitions_created)} partitions created, {len(pruned.partitions_dropped)} dropped, "
        f"{pruned.rows_deleted} report rows and {pruned.signals_deleted} signals deleted"
    )
    took = f"{progress.elapsed_s:.1f} s"
    typer.echo(
        f"dry run in {took}, nothing changed; it would be: {counts}" if dry_run else f"pruned in {took}: {counts}"
    )


@rules_app.command("validate")
def rules_validate(files: Annotated[list[Path], typer.Argument(help="Rule-pack YAML files.")]) -> None:
    """Check rule packs; each problem is printed with file, line and reason."""
    from remediator.rules import RulePackError, load_pack

    failed = False
    for file in files:
        try:
            pack = load_pack(file)
        except RulePackError as error:
            typer.echo(str(error), err=True)
            failed = True
        else:
            typer.echo(f"{file}: {len(pack.rules)} rules ok")
    if failed:
        raise typer.Exit(1)


@rules_app.command("doc")
def rules_doc(
    pack: Annotated[Path | None, typer.Argument(help="A rule pack; default: the built-in pack.")] = None,
) -> None:
    """Print a pack's rules as the Markdown table of docs/rules.md: condition, plan, priority, source, wrong if."""
    from remediator.rules import DEFAULT_PACK, RulePackError, load_pack
    from remediator.rules_doc import table

    try:
        loaded = load_pack(pack or DEFAULT_PACK)
    except RulePackError as error:
        raise _fail(str(error), 1) from None
    typer.echo(table(loaded), nl=False)


@rules_app.command("backtest")
def rules_backtest(
    packs: Annotated[
        list[Path] | None,
        typer.Argument(help="Rule-pack YAML files to try (on top of the default pack); none: the default pack."),
    ] = None,
    since: Annotated[str, typer.Option(help="How far back: 90m, 12h, 7d …")] = "7d",
    workers: Annotated[
        int,
        typer.Option(
            min=0, help="Processes sharing the hosts. 0: one per core when there are 20,000 reports or more, else 1."
        ),
    ] = 0,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Also write the result as JSON (every rule, its hits) to FILE.")
    ] = None,
    csv_file: Annotated[
        Path | None, typer.Option("--csv", help="Also write the hits as CSV (a row per hit) to FILE.")
    ] = None,
) -> None:
    """Replay stored reports through rule packs and print a table per rule: which hosts it would have hit and when.

    Acts on nothing: no remediation, ticket or decision is written. A progress bar shows on stderr when it is
    a terminal; the tables and a summary go to stdout.
    """
    settings = _settings()
    import datetime as dt
    import time

    from api.cli_backtest import AUTO_WORKERS_FROM, print_report, write_csv, write_json
    from core.db import Database
    from core.progress import tracked
    from remediator.backtest import BacktestError, backtest, to_replay
    from remediator.rules import RulePackError, load_ruleset

    try:
        seconds = _duration_s(since)
        ruleset = load_ruleset(packs or [])
        tried = {rule.id for rule in load_ruleset(packs or [], include_default=False).rules}
    except (ValueError, RulePackError) as error:
        raise _fail(str(error), 1) from None
    database = Database(settings.effective_database_url)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    began = time.perf_counter()
    with database.sessionmaker() as session:
        total = to_replay(session, start)
        if workers == 0:
            workers = (os.cpu_count() or 1) if total >= AUTO_WORKERS_FROM else 1
        with tracked("replaying stored reports", total) as tracker:
            try:
                result = backtest(session, ruleset, start, workers=workers, progress=tracker.advance)
            except BacktestError as error:
                raise _fail(f"a backtest worker failed:\n{error}", 1) from None
    elapsed = time.perf_counter() - began
    database.dispose()
    print_report(result, ruleset, tried, elapsed_s=elapsed)
    try:
        if json_file is not None:
            write_json(json_file, result, ruleset, elapsed_s=elapsed)
        if csv_file is not None:
            write_csv(csv_file, result)
    except OSError as error:
        raise _fail(f"{error.filename}: {error.strerror}") from None


def _duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise ValueError(f"--since {text!r}: use a number and a unit, e.g. 90m, 12h, 7d")
    return float(number) * units[unit]


@hosts_app.command("import")
def hosts_import(
    file: Annotated[Path, typer.Argument(help="CSV with a hostname column (and location columns).")],
) -> None:
    """Create or update hosts from an inventory CSV."""
    settings = _settings()
    from core.db import Database
    from remediator.inventory import CSV_COLUMNS, InventoryError, apply_inventory, parse_csv

    try:
        rows = parse_csv(file.read_text(encoding="utf-8"), source=str(file))
    except OSError as error:
        raise _fail(f"{file}: {error.strerror}") from None
    except InventoryError as error:
        raise _fail(f"{error}\n(columns: {', '.join(CSV_COLUMNS)})", 1) from None
    from core.progress import tracked

    database = Database(settings.effective_database_url)
    with tracked(f"importing {file.name}", total=len(rows)) as progress, database.session() as session:
        created, updated = apply_inventory(session, rows, actor="cli", on_row=progress.advance)
        progress.stage("storing")
    typer.echo(f"{len(rows)} hosts: {created} created, {updated} updated")
    typer.echo(
        f"imported {file} in {progress.elapsed_s:.1f} s: {len(rows)} rows, {created} created, {updated} updated, "
        f"{len(rows) - created - updated} unchanged"
    )


@keys_app.command("generate")
def keys_generate(
    path: Annotated[
        Path | None, typer.Argument(help="Private key file to create (default FLEETFIX_ACTION_KEY_FILE).")
    ] = None,
) -> None:
    """Create the Ed25519 key pair that signs host actions: PATH (private, mode 0600) and PATH.pub for agents."""
    from cyborg.envelope import generate_keypair

    target = path or _settings().effective_action_key_file
    try:
        signer = generate_keypair(target, target.with_suffix(".pub"))
    except FileExistsError:
        raise _fail(f"{target} exists; a new key would orphan every agent's public key (remove it first)") from None
    except OSError as error:
        raise _fail(f"{target}: {error.strerror}") from None
    typer.echo(f"private key {target} (key id {signer.key_id}); give agents {target.with_suffix('.pub')}")
    typer.echo("agents: FLEETFIX_AGENT_ACTION_PUBLIC_KEY=<that file>; central: FLEETFIX_ACTION_KEY_FILE=" + str(target))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
