"""The host side: only envelopes signed by the central key, for this host, current, allowed and valid
run — once; each refusal is reported centrally; results carry the command log; the journal makes a
redelivery after a crash safe."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cyborg import actions as cyborg_actions
from cyborg.envelope import KeyMaterialError, Refused, Signer, generate_keypair, load_signer, load_verifier
from cyborg.host.executor import REFUSAL_TASK, RESULT_TASK, STARTED_TASK
from cyborg.host.journal import JOURNAL_FILE, Journal
from remediator.actions import ACTIONS as CONTRACT
from tests.builders.envelopes import NOW, envelope
from tests.cyborg.helpers import sim_executor


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def test_action_table_agrees_with_the_remediators_contract() -> None:
    for name, action in cyborg_actions.ACTIONS.items():
        assert name in CONTRACT, name
        assert action.idempotent == CONTRACT[name].idempotent, name
    assert set(CONTRACT) - set(cyborg_actions.ACTIONS) == {"ticket"}


def test_a_signed_envelope_runs_once_and_reports_its_commands(signer: Signer) -> None:
    executor, driver, reports = sim_executor(signer)
    message = signer.sign(envelope("tune_error_reporting", {"edac_poll_s": 1})).model_dump()
    assert executor.handle(message) == {"outcome": "succeeded", "error": None}
    assert driver.host.edac_poll_msec == 1000
    assert not driver.host.has("edac_poll_slow")
    [started] = reports.of(STARTED_TASK)
    [result] = reports.of(RESULT_TASK)
    assert started["envelope_id"] == result["envelope_id"]
    assert result["outcome"] == "succeeded"
    [command] = result["commands"]
    assert command["argv"] == ["simulated", "tune_error_reporting", '{"poll_msec": 1000}']
    assert command["exit_status"] == 0
    assert "edac_poll_slow" in command["output"]

    # the same message again is a replay: refused, reported, and nothing runs twice
    assert executor.handle(message)["refused"] == "replayed"
    assert driver.applied_count("tune_error_reporting") == 1
    [refusal] = reports.of(REFUSAL_TASK)
    assert (refusal["code"], refusal["envelope_id"]) == ("replayed", result["envelope_id"])


def forged(signer: Signer) -> dict[str, object]:
    """Signed by a key that is not the central one, claiming the central key's id."""
    other = Signer(Ed25519PrivateKey.generate())
    message = other.sign(envelope("reboot", {"mode": "cold"})).model_dump()
    return {**message, "key_id": signer.key_id}


def tampered(signer: Signer) -> dict[str, object]:
    message = signer.sign(envelope("tune_error_reporting", {"edac_poll_s": 37})).model_dump()
    payload = json.loads(message["payload"])
    payload["action"] = "reboot"
    payload["params"] = {"mode": "cold"}
    return {**message, "payload": json.dumps(payload, sort_keys=True, separators=(",", ":"))}


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (forged, "bad_signature"),
        (lambda s: {**Signer(Ed25519PrivateKey.generate()).sign(envelope()).model_dump()}, "unknown_key"),
        (tampered, "bad_signature"),
        (lambda s: s.sign(envelope(issued_at=NOW - dt.timedelta(hours=1), expires_s=60)).model_dump(), "expired"),
        (lambda s: s.sign(envelope(issued_at=NOW + dt.timedelta(hours=1))).model_dump(), "not_yet_valid"),
        (lambda s: s.sign(envelope(hostname="sim-2")).model_dump(), "wrong_host"),
        (lambda s: s.sign(envelope("hard_ppr", {"dimm": "CPU0_DIMM_A1"})).model_dump(), "not_allowed"),
        (lambda s: s.sign(envelope("reimage")).model_dump(), "not_allowed"),
        (lambda s: s.sign(envelope("tune_error_reporting", {"edac_poll_s": 0})).model_dump(), "bad_params"),
        (lambda s: s.sign(envelope("reboot", {"mode": "warm", "then": "rm -rf /"})).model_dump(), "bad_params"),
        (lambda s: {"payload": "{}", "signature": "not base64!", "key_id": "x"}, "malformed"),
        (lambda s: ["not", "an", "envelope"], "malformed"),
    ],
    ids=[
        "forged",
        "other-key",
        "tampered",
        "expired",
        "issued-in-future",
        "wrong-host",
        "not-on-allow-list",
        "central-only-action",
        "bad-params",
        "unknown-param",
        "bad-signature-encoding",
        "not-a-message",
    ],
)
def test_refused_envelopes_run_nothing_and_are_reported(signer: Signer, make, code: str) -> None:  # type: ignore[no-untyped-def]
    allowed = tuple(a for a in cyborg_actions.HOST_ACTIONS if a != "hard_ppr")
    executor, driver, reports = sim_executor(signer, allowed=allowed)
    boot_id = driver.host.boot_id
    outcome = executor.handle(make(signer))
    assert outcome["refused"] == code
    assert driver.applied == []
    assert driver.host.boot_id == boot_id
    assert reports.of(RESULT_TASK) == []
    [refusal] = reports.of(REFUSAL_TASK)
    assert refusal["code"] == code
    assert refusal["hostname"] == "sim-1"
    assert refusal["reason"]


def test_without_a_public_key_every_action_is_refused(signer: Signer) -> None:
    executor, _, reports = sim_executor(signer)
    executor.verifier = None
    assert executor.handle(signer.sign(envelope()).model_dump())["refused"] == "no_key"
    assert reports.of(REFUSAL_TASK)[0]["code"] == "no_key"


def test_failures_hangs_and_dry_runs(signer: Signer) -> None:
    executor, driver, reports = sim_executor(signer)
    driver.host.fail_next_action = "fail"
    assert executor.handle(signer.sign(envelope()).model_dump())["outcome"] == "failed"
    assert driver.host.has("edac_poll_slow")

    driver.host.fail_next_action = "hang"
    hung = executor.handle(signer.sign(envelope(timeout_s=1)).model_dump())
    assert hung["outcome"] == "timed_out"
    assert "time budget" in reports.of(RESULT_TASK)[-1]["error"]

    dry = executor.handle(signer.sign(envelope(dry_run=True)).model_dump())
    assert dry["outcome"] == "succeeded"
    assert reports.of(RESULT_TASK)[-1]["commands"][0]["kind"] == "dry_run"
    assert driver.host.has("edac_poll_slow")  # a dry run changes nothing

    assert executor.handle(signer.sign(envelope(params={"edac_poll_s": 1})).model_dump())["outcome"] == "succeeded"
    assert not driver.host.has("edac_poll_slow")


def test_running_an_idempotent_action_twice_leaves_the_host_as_once(signer: Signer) -> None:
    executor, driver, _ = sim_executor(signer, faults=("cxl_demotion_disabled",), hardware_class="compute-spr-cxl")
    for _ in range(2):
        assert executor.handle(signer.sign(envelope("enable_demotion")).model_dump())["outcome"] == "succeeded"
    assert driver.host.demotion_enabled is True
    assert not driver.host.has("cxl_demotion_disabled")


def test_a_reflash_sets_each_target_and_the_first_failure_stops_the_rest(signer: Signer) -> None:
    executor, driver, reports = sim_executor(signer, faults=("firmware_old_bmc",))
    targets = [{"component": "bmc", "version": "4.40.40.40"}, {"component": "bios", "version": "2.10.2"}]
    assert executor.handle(signer.sign(envelope("reflash_firmware", {"targets": targets})).model_dump())["outcome"] == (
        "succeeded"
    )
    assert driver.host.bmc_firmware == "4.40.40.40"
    assert reports.of(RESULT_TASK)[-1]["verified"]["boot_id"] == driver.host.boot_id  # the BIOS update rebooted it
    bad = [{"component": "nic:eth9", "version": "1.0"}, {"component": "bmc", "version": "9.9"}]
    assert executor.handle(signer.sign(envelope("reflash_firmware", {"targets": bad})).model_dump())["outcome"] == (
        "failed"
    )
    assert driver.host.bmc_firmware == "4.40.40.40"  # never reached


def test_an_agent_that_died_mid_action_does_not_repeat_a_non_idempotent_one(signer: Signer, tmp_path: Path) -> None:
    """The journal on disk says what was running; the next start decides from the boot id."""
    journal = Journal(tmp_path / JOURNAL_FILE)
    _, driver, _ = sim_executor(signer, journal=journal)
    message = signer.sign(envelope("reboot", {"mode": "warm"})).model_dump()
    # The agent accepted it and died before its driver ran anything (no restart happened).
    envelope_id = json.loads(message["payload"])["id"]
    from cyborg.envelope import Envelope
    from cyborg.host.journal import JournalEntry

    journal.put(
        JournalEntry.accept(Envelope.model_validate_json(message["payload"]), boot_id=driver.boot_id(), now=NOW)
    )
    restarted, driver2, reports2 = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE))
    driver2.host = driver.host
    assert restarted.resume() == 1
    [result] = reports2.of(RESULT_TASK)
    assert (result["envelope_id"], result["outcome"]) == (envelope_id, "interrupted")
    assert driver2.applied == []  # not run a second time
    # and a redelivery of the same message is now a replay
    assert restarted.handle(message)["refused"] == "replayed"


def test_a_reboot_that_happened_while_the_agent_was_gone_is_verified_not_repeated(
    signer: Signer, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    _, driver, _ = sim_executor(signer, journal=journal)
    message = signer.sign(envelope("reboot", {"mode": "warm"})).model_dump()
    from cyborg.envelope import Envelope
    from cyborg.host.journal import JournalEntry

    old_boot = driver.boot_id()
    entry = JournalEntry.accept(Envelope.model_validate_json(message["payload"]), boot_id=old_boot, now=NOW)
    entry.restart_issued_at = NOW.isoformat()  # the driver had asked for the restart
    journal.put(entry)
    driver.host.reboot()  # the reboot took the agent down with it
    restarted, driver2, reports2 = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE))
    driver2.host = driver.host
    restarted.handle(message)  # the broker delivers the unacknowledged message again
    [result] = reports2.of(RESULT_TASK)
    assert result["outcome"] == "succeeded"
    assert result["changed"] == {"completed_across_restart": True}
    assert result["verified"]["boot_id"] == driver.host.boot_id
    # the boot it ran in: the central side tells the reports made before the restart by it (policies.py)
    assert result["boot_id_before"] == old_boot != result["verified"]["boot_id"]
    assert driver2.applied == []


def test_an_idempotent_action_cut_short_is_run_again(signer: Signer, tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    _, driver, _ = sim_executor(signer, journal=journal)
    message = signer.sign(envelope("tune_error_reporting")).model_dump()
    from cyborg.envelope import Envelope
    from cyborg.host.journal import JournalEntry

    journal.put(
        JournalEntry.accept(Envelope.model_validate_json(message["payload"]), boot_id=driver.boot_id(), now=NOW)
    )
    restarted, driver2, reports2 = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE))
    assert restarted.resume() == 1
    assert reports2.of(RESULT_TASK)[0]["outcome"] == "succeeded"
    assert driver2.applied_count("tune_error_reporting") == 1


def test_an_idempotent_action_cut_short_is_not_run_again_after_its_envelope_expired(
    signer: Signer, tmp_path: Path
) -> None:
    """An agent that comes back after the envelope's expiry does not start it again (it may have been
    aborted meanwhile): it reports the action as interrupted."""
    journal = Journal(tmp_path / JOURNAL_FILE)
    _, driver, _ = sim_executor(signer, journal=journal)
    message = signer.sign(envelope("tune_error_reporting", expires_s=60)).model_dump()
    from cyborg.envelope import Envelope
    from cyborg.host.journal import JournalEntry

    journal.put(
        JournalEntry.accept(Envelope.model_validate_json(message["payload"]), boot_id=driver.boot_id(), now=NOW)
    )
    later = NOW + dt.timedelta(seconds=61)
    restarted, driver2, reports2 = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE), clock=lambda: later)
    assert restarted.resume() == 1
    [result] = reports2.of(RESULT_TASK)
    assert result["outcome"] == "interrupted"
    assert "expired" in result["error"]
    assert driver2.applied_count("tune_error_reporting") == 0


def test_a_host_that_goes_down_reports_nothing_until_it_comes_back(signer: Signer) -> None:
    executor, driver, reports = sim_executor(signer)
    driver.host.fail_next_action = "stay_down"
    assert executor.handle(signer.sign(envelope("reboot", {"mode": "warm"})).model_dump()) == {"outcome": "host_down"}
    assert reports.of(RESULT_TASK) == []
    assert driver.host.down
    driver.host.apply("power_cycle")  # its BMC
    assert executor.resume() == 1  # its agent starting again
    assert reports.of(RESULT_TASK)[0]["outcome"] == "succeeded"


def test_keys_on_disk(tmp_path: Path) -> None:
    signer = generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    assert (tmp_path / "k.pem").stat().st_mode & 0o777 == 0o600
    assert load_signer(tmp_path / "k.pem").key_id == signer.key_id
    assert load_verifier(tmp_path / "k.pub").key_id == signer.key_id
    with pytest.raises(FileExistsError):
        generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    (tmp_path / "bad.pem").write_text("not a key")
    with pytest.raises(KeyMaterialError, match=r"bad\.pem"):
        load_signer(tmp_path / "bad.pem")


def test_the_host_reads_its_key_without_cryptography_and_takes_only_an_ed25519_one(tmp_path: Path) -> None:
    """The agent never loads `cryptography` (about 7.5 MiB; it checks signatures in a child process,
    test_envelope_child); the key file is read by its fixed encoding, and anything but an Ed25519 public
    key is refused as before."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

    signer = generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    code = (
        "import sys; from pathlib import Path; from cyborg.envelope import load_verifier; "
        f"v = load_verifier(Path({str(tmp_path / 'k.pub')!r})); "
        "print(v.key_id, any(m.startswith('cryptography') for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == [signer.key_id, "False"]
    other = generate_private_key(SECP256R1()).public_key()
    pem = other.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "ec.pub").write_bytes(b"an EC key\n" + pem)
    (tmp_path / "private.pub").write_bytes((tmp_path / "k.pem").read_bytes())
    for name, why in (("ec.pub", "not an Ed25519 public key"), ("private.pub", "not a PEM public key")):
        with pytest.raises(KeyMaterialError, match=why):
            load_verifier(tmp_path / name)
    with pytest.raises(KeyMaterialError, match="cannot read"):
        load_verifier(tmp_path / "missing.pub")
    verifier = load_verifier(tmp_path / "k.pub")
    assert verifier.open(signer.sign(envelope(hostname="h")).model_dump(), hostname="h", now=NOW).hostname == "h"
    forged = Signer(Ed25519PrivateKey.generate()).sign(envelope(hostname="h")).model_dump()
    with pytest.raises(Refused) as refused:
        verifier.open({**forged, "key_id": verifier.key_id}, hostname="h", now=NOW)
    assert refused.value.code == "bad_signature"


def test_an_envelope_delivered_again_while_it_runs_is_refused_not_recovered(signer: Signer, tmp_path: Path) -> None:
    """The outside review's case: a second delivery of a running envelope was taken for crash recovery
    (a reboot reported 'interrupted' beside 'succeeded'; clear_sel ran twice). The executor itself now
    knows the envelope is in flight, whatever the worker pool."""
    import threading

    executor, driver, reports = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE), faults=("sel_full",))
    started, release = threading.Event(), threading.Event()
    real_run = driver.run

    def slow_run(*args: object, **kwargs: object) -> dict[str, object]:
        started.set()
        assert release.wait(10)
        return real_run(*args, **kwargs)  # type: ignore[arg-type]

    driver.run = slow_run  # type: ignore[method-assign]
    message = signer.sign(envelope("clear_sel")).model_dump()
    first: dict[str, object] = {}
    worker = threading.Thread(target=lambda: first.update(executor.handle(message)))
    worker.start()
    assert started.wait(10)
    second = executor.handle(message)  # the same envelope again, while the first runs
    assert second["refused"] == "in_flight"
    release.set()
    worker.join(10)
    assert first["outcome"] == "succeeded"
    assert [r["outcome"] for r in reports.of(RESULT_TASK)] == ["succeeded"]  # no "interrupted" beside it
    assert [r["code"] for r in reports.of(REFUSAL_TASK)] == ["in_flight"]
    assert [a["action"] for a in driver.applied] == ["clear_sel"]  # once
