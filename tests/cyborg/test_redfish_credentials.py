"""Credentials kept out of logs and read alike on both sides (review r5 finding 15): the password and the
session token redacted from what the BMC answers, image URLs with userinfo refused and query strings
masked, a CA bundle used whatever verify_tls says, and password files read the same way by the agent
and central."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.collectors.redfish_client import RedfishClient as AgentClient
from checker.collectors.redfish_client import RedfishSettings
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.redfish_client import RedfishClient, RedfishConfig, request_body
from cyborg.drivers.redfish_media import check_image
from tests.checker.redfish_server import (  # noqa: F401  (fixtures)
    PASSWORD,
    USER,
    RedfishService,
    redfish_password_fixture,
    redfish_service_fixture,
    skeleton,
)
from tests.processes import free_port


def test_the_password_and_the_session_token_are_redacted(service: RedfishService, password_file: Path) -> None:
    skeleton(service)
    client = RedfishClient("bmc-1.example", RedfishConfig(username=USER, password_file=password_file))
    client.url = service.url  # our test service speaks http
    client.call(ActionContext(None, timeout_s=30), "root", lambda root: root.redfish_version)
    [token] = service.sessions
    echoed = f"PropertyValueFormatError: the value {PASSWORD} for Password; session {token}"
    said = client._redacted(echoed)
    assert PASSWORD not in said
    assert token not in said
    assert said == "PropertyValueFormatError: the value *** for Password; session ***"
    client.close()


def test_an_image_url_with_credentials_is_refused_and_a_query_is_masked() -> None:
    config, ctx = (
        RedfishConfig(username=USER, password_file=None, connect_timeout_s=1),
        ActionContext(None, timeout_s=30),
    )
    with pytest.raises(ActionFailed, match="must not carry credentials") as refused:
        check_image("https://ci:tok-4455@repo.example/bmc.bin", "ab" * 32, 1 << 20, config, ctx)
    assert "tok-4455" not in str(refused.value)
    signed = f"https://127.0.0.1:{free_port()}/{'ab' * 32}/bmc.bin?X-Amz-Signature=sig-99887766"
    with pytest.raises(ActionFailed) as failed:  # nobody listens: the fetch fails, saying where without the token
        check_image(signed, "ab" * 32, 1 << 20, config, ctx)
    assert "sig-99887766" not in str(failed.value)
    assert all("sig-99887766" not in " ".join(r.argv) + r.output for r in ctx.log.records)
    assert "sig-99887766" not in request_body(f'{{"ImageURI": "{signed}", "TransferProtocol": "HTTPS"}}')


def test_an_image_url_that_does_not_name_its_digest_is_refused_before_any_fetch() -> None:
    """Issue 19 item 8: the BMC fetches the URL again after our check; only a content-addressed URL (its SHA-256
    in the path) is taken, unless FLEETFIX_REDFISH_REQUIRE_CONTENT_ADDRESSED is off."""
    config, ctx = RedfishConfig(username=USER, password_file=None), ActionContext(None, timeout_s=30)
    url = f"https://127.0.0.1:{free_port()}/bmc-7.10.bin"  # nobody listens: a fetch would fail otherwise
    with pytest.raises(ActionFailed, match="does not name its SHA-256"):
        check_image(url, "cd" * 32, 1 << 20, config, ctx)
    assert ctx.log.records == []  # refused before any request
    # Review r2 finding 4: naming the digest somewhere is not enough when the path resolves to another file
    base, digest = f"https://127.0.0.1:{free_port()}", "cd" * 32
    for bypass in (
        f"{base}/{digest}/../latest.bin",  # httpx itself sends /latest.bin
        f"{base}/{digest}/%2e%2e/latest.bin",  # the server resolves it to /latest.bin
        f"{base}/latest.bin;{digest}",  # a servlet container drops the ;parameter
        f"{base}/{digest}%2flatest.bin",
        f"{base}/latest.bin?{digest}",  # a query is not the path
        f"{base}/x{digest}.bin",  # not a token of its own
    ):
        with pytest.raises(ActionFailed, match="not content-addressed"):
            check_image(bypass, digest, 1 << 20, config, ctx)
    assert ctx.log.records == []
    for good in (f"{base}/bmc-7.10-{digest}.bin", f"{base}/sha256/{digest}", f"{base}/{digest.upper()}.iso"):
        with pytest.raises(ActionFailed, match="cannot fetch the image"):  # taken: fetched (nobody listens)
            check_image(good, digest, 1 << 20, config.__class__(**{**config.__dict__, "connect_timeout_s": 1}), ctx)
    lax = RedfishConfig(username=USER, password_file=None, content_addressed=False, connect_timeout_s=1)
    with pytest.raises(ActionFailed, match="cannot fetch the image"):
        check_image(url, "cd" * 32, 1 << 20, lax, ctx)


def test_a_ca_bundle_is_used_whatever_verify_tls_says(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    assert RedfishConfig(username="u", password_file=None, verify_tls=False, ca_file=bundle).verify == str(bundle)
    assert RedfishConfig(username="u", password_file=None, verify_tls=False).verify is False
    assert RedfishConfig(username="u", password_file=None).verify is True


def test_both_sides_read_a_password_file_alike(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text(" spaced pass \r\n")
    central = RedfishClient("bmc", RedfishConfig(username="u", password_file=path))._password()
    agent = AgentClient(RedfishSettings(url="https://bmc", password_file=path))._password()
    assert central == agent == " spaced pass "
