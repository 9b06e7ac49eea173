"""A rediss:// broker with a private CA: Celery, the agent's stream writer and the ingester all
verify the broker's certificate with FLEETFIX_BROKER_TLS_CA_FILE, against a real Redis serving TLS."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select

from checker.agent.delivery import Delivery
from checker.agent.spool import Spool
from core.db import Database, utcnow
from core.queue import INGEST_STREAM, check_broker, create_celery
from remediator.models import Host
from remediator.rules import RuleRegistry
from remediator.stream import StreamIngester
from tests.builders.reports import edac_report
from tests.builders.runtime import wired
from tests.conftest import truncate_all
from tests.processes import free_port, wait_until


def _openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    assert tool is not None, "openssl is needed to make this test's certificates: apt-get install openssl"
    subprocess.run([tool, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """redis-server on a TLS port with a certificate signed by a CA of this test's own."""
    work = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=fleetfix-test-ca", cwd=work)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
             "-subj", "/CN=127.0.0.1", cwd=work)  # fmt: skip
    (work / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "srv.crt", "-days", "2", "-extfile", "ext", cwd=work)  # fmt: skip
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", "srv.crt",
         "--tls-key-file", "srv.key", "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--dir", str(work)],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"rediss://127.0.0.1:{port}/0"
    tls = {"ca_certs": str(work / "ca.crt")}
    try:
        wait_until(lambda: _answers(url, tls["ca_certs"]), 20, "redis-server on its TLS port")
        yield url, tls
    finally:
        server.terminate()
        server.wait(10)


def _answers(url: str, ca: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, ssl_ca_certs=ca, socket_connect_timeout=1).ping())
    except redis.ConnectionError:
        return False


def report_payload(hostname: str) -> dict[str, Any]:
    return edac_report(hostname, at=utcnow() - dt.timedelta(minutes=1)).model_dump(mode="json")


def test_celery_and_the_agents_stream_writer_verify_the_broker_with_the_configured_ca(
    tls_redis: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, tls = tls_redis
    check_broker(url, tls=tls)  # Celery's (kombu's) connection
    trusted = Delivery(create_celery(url, tls=tls, make_current=False), spool=Spool(tmp_path / "a", 10))
    assert trusted.deliver(report_payload("tls-001")) == "broker"
    client = redis.Redis.from_url(url, ssl_ca_certs=tls["ca_certs"])
    assert client.xlen(INGEST_STREAM) == 1
    # Without the CA the broker's certificate cannot be verified: nothing is sent in the clear or
    # to an unverified peer; the report waits in the spool.
    untrusting = Delivery(create_celery(url, make_current=False), spool=Spool(tmp_path / "b", 10))
    assert untrusting.deliver(report_payload("tls-002")) == "spool"
    assert client.xlen(INGEST_STREAM) == 1


def test_the_ingester_reads_a_tls_broker(
    tls_redis: tuple[str, dict[str, str]], integration_pg_url: str, celery_app: object
) -> None:
    url, tls = tls_redis
    truncate_all(integration_pg_url)
    database = wired(Database(integration_pg_url))
    try:
        client = redis.Redis.from_url(url, ssl_ca_certs=tls["ca_certs"])
        client.delete(INGEST_STREAM)
        client.xadd(INGEST_STREAM, {"report": edac_report("tls-010").model_dump_json()})
        ingester = StreamIngester(url, database, RuleRegistry(), block_ms=100, tls=tls)
        ingester.ensure_group()
        assert ingester.run_once() == 1
        with database.session() as session:
            assert session.scalar(select(func.count()).select_from(Host).where(Host.hostname == "tls-010")) == 1
    finally:
        database.dispose()
