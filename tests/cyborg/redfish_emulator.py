"""A real Redfish service for the tests: OpenStack's sushy-emulator (sushy-tools) as a process on 127.0.0.1.

`RedfishEmulator` writes the emulator's config (its fake-system driver: power states that change a few
seconds after a Reset, as hardware does; boot overrides; virtual media; UpdateService), a bcrypt htpasswd
file (the emulator's Basic auth) and a TLS certificate signed by a CA of the test's own, starts
`python -m tests.cyborg.redfish_emulator` on a free port over HTTPS and waits until it answers. `ImageServer`
serves files over HTTPS with the same CA (firmware images and the reinstall ISO, which the emulator
FETCHES on InsertMedia as a BMC would).

Run as a module, this file is sushy-emulator's own `main()` with one addition: its fake driver has no
firmware versions (`get_versions` raises NotSupportedError, so its SimpleUpdate answers 500), and we give
it the dict-backed pair the libvirt driver has, so SimpleUpdate bumps the BIOS version as the emulator
is written to. Nothing else of the emulator is changed. A missing sushy-tools fails the test: no skip.
"""

from __future__ import annotations

import datetime as dt
import http.server
import importlib.util
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_UUID = "27946b59-9e44-4fa7-8e91-f3527a1ef094"  # the fake driver's own default system


def require_sushy_emulator() -> None:
    if importlib.util.find_spec("sushy_tools") is None or importlib.util.find_spec("bcrypt") is None:
        raise RuntimeError(
            "sushy-emulator is not installed: the Redfish tests drive a real Redfish service. "
            "Install the dev dependencies: .venv/bin/pip install -c constraints.txt 'sushy-tools~=2.2'"
        )


class LabCa:
    """A CA and one server certificate for 127.0.0.1, written as PEM files."""

    def __init__(self, directory: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetfix test BMC CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.pem"
        self.cert_file = directory / "server.pem"
        self.key_file = directory / "server-key.pem"
        self.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


class RedfishEmulator:
    """sushy-emulator with the fake driver: one system, off, BIOS 1.0.0; Basic auth; HTTPS."""

    def __init__(self, directory: Path, ca: LabCa, *, username: str, password: str, power_state: str = "Off") -> None:
        require_sushy_emulator()
        import bcrypt

        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"https://{self.address}"
        self.ca = ca
        self._login = (username, password)
        auth_file = directory / "htpasswd"
        digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        auth_file.write_text(f"{username}:{digest}\n")
        system: dict[str, Any] = {
            "uuid": SYSTEM_UUID,
            "name": "fake",
            "power_state": power_state,
            "external_notifier": False,
            "nics": [{"mac": "00:5c:52:31:3a:9c", "ip": "172.22.0.100"}],
            "versions": {"BiosVersion": "1.0.0"},
        }
        config = directory / "emulator.conf"
        config.write_text(
            f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = [{system!r}]\n"
            f"SUSHY_EMULATOR_STATE_DIR = {str(directory / 'state')!r}\n"
            f"SUSHY_EMULATOR_AUTH_FILE = {str(auth_file)!r}\n"
            f"SUSHY_EMULATOR_SSL_CERT = {str(ca.cert_file)!r}\n"
            f"SUSHY_EMULATOR_SSL_KEY = {str(ca.key_file)!r}\n"
        )
        self.log_path = directory / "emulator.log"
        self._log = self.log_path.open("w")
        argv = [sys.executable, "-m", "tests.cyborg.redfish_emulator", "--config", str(config), "--fake"]
        argv += ["--interface", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_until_it_answers()

    def _wait_until_it_answers(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sushy-emulator exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/redfish/v1/", verify=context, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"sushy-emulator did not answer within {timeout_s}s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def requests(self, method: str, path: str) -> int:
        """How many times the emulator served METHOD PATH (its access log; werkzeug colours some lines)."""
        return self.output().count(f"{method} {path} HTTP/1.1")

    def get(self, path: str) -> dict[str, Any]:
        """A resource as the emulator serves it, read past the driver under test."""
        context = ssl.create_default_context(cafile=str(self.ca.ca_file))
        response = httpx.get(f"{self.url}{path}", auth=self._login, verify=context, timeout=10)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def system(self) -> dict[str, Any]:
        return self.get(f"/redfish/v1/Systems/{SYSTEM_UUID}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


class ImageServer:
    """Files of one directory over HTTPS (the operator's image repository), in a thread of the test."""

    def __init__(self, directory: Path, ca: LabCa) -> None:
        self.served: dict[str, int] = {}
        handler = _quiet_handler(directory, self.served)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.socket = ca.server_context().wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _quiet_handler(directory: Path, served: dict[str, int]) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def do_GET(self) -> None:
            served[self.path] = served.get(self.path, 0) + 1
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _give_the_fake_driver_versions() -> None:
    """The libvirt driver keeps firmware versions; the fake one does not. Give it the same pair, backed by
    the fake system's own dict (its `versions` key), so SimpleUpdate works as the emulator intends."""
    from sushy_tools.emulator.resources.systems import fakedriver

    def get_versions(self: Any, identity: str) -> dict[str, str]:
        return dict(self._get(identity).get("versions") or {})

    def set_versions(self: Any, identity: str, firmware_versions: dict[str, str]) -> None:
        system = self._get(identity)
        self._update(system, versions={**(system.get("versions") or {}), **firmware_versions})

    fakedriver.FakeDriver.get_versions = get_versions  # type: ignore[attr-defined]
    fakedriver.FakeDriver.set_versions = set_versions  # type: ignore[attr-defined]


if __name__ == "__main__":
    _give_the_fake_driver_versions()
    from sushy_tools.emulator import main as emulator

    sys.exit(emulator.main())
