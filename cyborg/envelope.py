"""Signed action envelopes: what the central service asks one host to do, once, before a deadline.

The central service signs with an Ed25519 private key; hosts hold only the public key, so a
compromised host cannot forge actions for another. The signature covers the exact bytes of the
JSON payload (no re-serialisation on the host), which names the host, the remediation, step and
attempt, the action and its parameters, when it was issued and when it expires, and a random id
the host journals so a replay is recognised. Ed25519 as in RFC 8032, through `cryptography`.

A host reads its public key at start without `cryptography` (the key file's encoding is fixed,
RFC 8410) and verifies each envelope in a short-lived child process of its own interpreter that
loads the library (`Verifier(..., in_child=True)`, what load_verifier gives): the library is about
7.5 MiB of resident memory an agent would otherwise hold for good after its first envelope, and
envelopes are rare (docs/agent.md, "Figures"). The child's answer is its exit status, 0 for a
signature that holds and 10 for one that does not; anything else (it could not start, crashed,
hung) refuses the envelope as `unverifiable`, never accepts it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ENVELOPE_VERSION: Literal[1] = 1
CLOCK_SKEW_S = 120
"""How far ahead of the host's clock an envelope may be issued and still be accepted."""

RefusalCode = Literal[
    "malformed", "bad_signature", "unknown_key", "no_key", "wrong_host", "expired", "not_yet_valid", "not_allowed",
    "bad_params", "replayed", "no_journal", "in_flight", "unverifiable",
]  # fmt: skip

_SIGNATURE_FAILS = 10  # not 1, which is also what an uncaught exception in the child exits with
VERIFY_TIMEOUT_S = 30
"""How long the child process that checks a signature may take (it takes a few hundredths of a second)."""

_CHILD_VERIFIER = f"""
import sys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
data = sys.stdin.buffer.read()
try:
    Ed25519PublicKey.from_public_bytes(data[:32]).verify(data[32:96], data[96:])
except InvalidSignature:
    sys.exit({_SIGNATURE_FAILS})
sys.exit(0)
"""


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = ENVELOPE_VERSION
    id: uuid.UUID = Field(description="Random; the host journals it, so a replay is recognised.")
    hostname: str
    remediation_id: int
    step: int
    attempt: int
    action: str
    params: dict[str, Any]
    timeout_s: int
    dry_run: bool = False
    issued_at: dt.datetime
    expires_at: dt.datetime = Field(description="Not started by then: refused.")


class SignedMessage(BaseModel):
    """What travels on host.<hostname>: the payload text exactly as signed, the signature, the key's id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    payload: str
    signature: str
    key_id: str


class Refused(Exception):
    """The host will not run this envelope. `code` is one of RefusalCode; the message says why.

    `verified`: the envelope's signature held, so `envelope` is what the central service sent. Without
    it, `envelope` is only what an unverified payload claims (a forgery or a tampered copy), reported
    for the audit log and never acted on."""

    def __init__(
        self, code: RefusalCode, message: str, envelope: Envelope | None = None, *, verified: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.envelope = envelope
        self.verified = verified and envelope is not None


class KeyMaterialError(Exception):
    """A key file is missing or not an Ed25519 key in PEM; the message names the file."""


ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
"""DER of an Ed25519 SubjectPublicKeyInfo up to the key (RFC 8410): the whole file is this and 32 bytes."""
_PEM_PUBLIC_KEY = re.compile(rb"-----BEGIN PUBLIC KEY-----\s*(.*?)\s*-----END PUBLIC KEY-----", re.S)


def key_id(raw_public_key: bytes) -> str:
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


def _raw(public_key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Signer:
    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key()
        self.key_id = key_id(_raw(self.public_key))

    def sign(self, envelope: Envelope) -> SignedMessage:
        payload = json.dumps(envelope.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        signature = self._key.sign(payload.encode())
        return SignedMessage(payload=payload, signature=base64.b64encode(signature).decode(), key_id=self.key_id)

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def verifier(self) -> Verifier:
        return Verifier(_raw(self.public_key))


class Verifier:
    """Checks envelopes against the central public key, given as its 32 raw bytes."""

    def __init__(self, raw_public_key: bytes, *, in_child: bool = False) -> None:
        if len(raw_public_key) != 32:
            raise ValueError(f"an Ed25519 public key is 32 bytes, not {len(raw_public_key)}")
        self.raw_public_key = raw_public_key
        self.key_id = key_id(raw_public_key)
        self.in_child = in_child
        self._public_key: Ed25519PublicKey | None = None

    def _verify(self, signature: bytes, payload: bytes) -> bool:
        if len(signature) != 64:  # an Ed25519 signature is 64 bytes; the child reads it by that length
            return False
        if self.in_child:
            return _verify_in_child(self.raw_public_key, signature, payload)
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        if self._public_key is None:
            self._public_key = Ed25519PublicKey.from_public_bytes(self.raw_public_key)
        try:
            self._public_key.verify(signature, payload)
        except InvalidSignature:
            return False
        return True

    def open(self, message: Any, *, hostname: str, now: dt.datetime) -> Envelope:
        """The envelope, if the message is signed by the central key, meant for this host and current."""
        try:
            signed = SignedMessage.model_validate(message)
        except ValidationError as error:
            raise Refused("malformed", f"not a signed envelope: {error.errors()[0]['msg']}") from None
        try:
            signature = base64.b64decode(signed.signature, validate=True)
        except ValueError:
            raise Refused("malformed", "signature is not base64") from None
        if not self._verify(signature, signed.payload.encode()):
            claimed = _claimed(signed.payload)
            if signed.key_id != self.key_id:
                raise Refused("unknown_key", f"signed with key {signed.key_id}, not {self.key_id}", claimed) from None
            raise Refused("bad_signature", "the signature does not match the payload", claimed) from None
        try:
            envelope = Envelope.model_validate_json(signed.payload)
        except ValidationError as error:
            raise Refused("malformed", f"payload: {error.errors()[0]['msg']}") from None
        if envelope.hostname != hostname:
            raise Refused(
                "wrong_host", f"envelope is for {envelope.hostname}, this is {hostname}", envelope, verified=True
            )
        if now >= envelope.expires_at:
            raise Refused("expired", f"expired at {envelope.expires_at.isoformat()}", envelope, verified=True)
        if envelope.issued_at > now + dt.timedelta(seconds=CLOCK_SKEW_S):
            raise Refused(
                "not_yet_valid", f"issued in the future ({envelope.issued_at.isoformat()})", envelope, verified=True
            )
        return envelope


def _verify_in_child(raw_public_key: bytes, signature: bytes, payload: bytes) -> bool:
    """The signature checked by `cryptography` in a child process of this interpreter (`-I`: no
    environment, no user site, no current directory on its path). Raises Refused('unverifiable') when
    the child gives no answer."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD_VERIFIER],
            input=raw_public_key + signature + payload,
            capture_output=True,
            timeout=VERIFY_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Refused("unverifiable", f"the signature could not be checked: {error}") from None
    if done.returncode in (0, _SIGNATURE_FAILS):
        return done.returncode == 0
    said = done.stderr.decode(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"exit status {done.returncode}"
    raise Refused("unverifiable", f"the signature could not be checked: {reason[:200]}")


def _claimed(payload: str) -> Envelope | None:
    """What an unverified payload claims to be, for the refusal report only (never acted on)."""
    try:
        return Envelope.model_validate_json(payload)
    except ValidationError:
        return None


def generate_keypair(private_path: Path, public_path: Path) -> Signer:
    """Write a new Ed25519 key pair as PEM: the private key readable by its owner only."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    private_path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private_pem)
    signer = Signer(key)
    public_path.parent.mkdir(parents=True, exist_ok=True)
    public_path.write_bytes(signer.public_pem())
    return signer


def load_signer(path: Path) -> Signer:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as error:
        raise KeyMaterialError(f"{path}: cannot read the action signing key: {error.strerror}") from None
    except (ValueError, TypeError) as error:
        raise KeyMaterialError(f"{path}: not a PEM private key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyMaterialError(f"{path}: not an Ed25519 key ({type(key).__name__})")
    return Signer(key)


def load_verifier(path: Path) -> Verifier:
    """The verifier of a PEM public key file (SubjectPublicKeyInfo), which must hold an Ed25519 key."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise KeyMaterialError(f"{path}: cannot read the action public key: {error.strerror}") from None
    found = _PEM_PUBLIC_KEY.search(text)
    if found is None:
        raise KeyMaterialError(f"{path}: not a PEM public key (no BEGIN PUBLIC KEY block)")
    try:
        der = base64.b64decode(b"".join(found.group(1).split()), validate=True)
    except binascii.Error as error:
        raise KeyMaterialError(f"{path}: not a PEM public key: {error}") from None
    if len(der) != len(ED25519_SPKI_PREFIX) + 32 or not der.startswith(ED25519_SPKI_PREFIX):
        raise KeyMaterialError(f"{path}: not an Ed25519 public key")
    return Verifier(der[len(ED25519_SPKI_PREFIX) :], in_child=True)
