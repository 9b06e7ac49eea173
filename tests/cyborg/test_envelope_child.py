"""The host checks envelope signatures in a child process (cyborg.envelope: `in_child`), so its agent never
holds `cryptography` for good; the child's verdict is the in-process one, and a child that gives no answer
refuses the envelope (`unverifiable`), never accepts it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cyborg import envelope as envelopes
from cyborg.envelope import Refused, Signer, Verifier, generate_keypair
from tests.builders.envelopes import NOW, envelope


def test_the_agent_verifies_without_loading_cryptography(tmp_path: Path) -> None:
    signer = generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    message = signer.sign(envelope(hostname="h")).model_dump_json()
    code = (
        "import json, sys, datetime as dt; from pathlib import Path; from cyborg.envelope import load_verifier; "
        f"v = load_verifier(Path({str(tmp_path / 'k.pub')!r})); "
        f"e = v.open(json.loads({message!r}), hostname='h', now=dt.datetime.fromisoformat({NOW.isoformat()!r})); "
        "print(e.hostname, any(m.startswith('cryptography') for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["h", "False"]


def test_the_child_gives_the_in_process_verdict() -> None:
    """Valid, and each way a copy can be wrong: a flipped bit in the payload or the signature, a signature
    cut short or too long, another key's signature, an empty one."""
    key = Ed25519PrivateKey.generate()
    signer = Signer(key)
    raw = signer.verifier().raw_public_key
    here, child = Verifier(raw), Verifier(raw, in_child=True)
    payload = signer.sign(envelope(hostname="h")).payload.encode()
    signature = key.sign(payload)
    other = Ed25519PrivateKey.generate().sign(payload)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    cases = [
        (signature, payload),
        (signature, payload[:-1] + bytes([payload[-1] ^ 1])),
        (flipped, payload),
        (signature[:63], payload),
        (signature + b"\0", payload),
        (other, payload),
        (b"", payload),
    ]
    verdicts = [(here._verify(s, p), child._verify(s, p)) for s, p in cases]
    assert [a for a, _ in verdicts] == [True, False, False, False, False, False, False]
    assert [b for _, b in verdicts] == [a for a, _ in verdicts]


@pytest.mark.parametrize(
    ("program", "why"),
    [("import sys; sys.exit(3)", "exit status 3"), ("raise ImportError('no cryptography here')", "no cryptography")],
)
def test_a_child_that_gives_no_answer_refuses_the_envelope(
    monkeypatch: pytest.MonkeyPatch, program: str, why: str
) -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    verifier = Verifier(signer.verifier().raw_public_key, in_child=True)
    monkeypatch.setattr(envelopes, "_CHILD_VERIFIER", program)
    with pytest.raises(Refused) as refused:
        verifier.open(signer.sign(envelope(hostname="h")).model_dump(), hostname="h", now=NOW)
    assert refused.value.code == "unverifiable"
    assert why in str(refused.value)
    assert not refused.value.verified


def test_an_interpreter_that_cannot_start_refuses_the_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    verifier = Verifier(signer.verifier().raw_public_key, in_child=True)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    with pytest.raises(Refused, match="could not be checked") as refused:
        verifier.open(signer.sign(envelope(hostname="h")).model_dump(), hostname="h", now=NOW)
    assert refused.value.code == "unverifiable"
