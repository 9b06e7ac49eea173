"""One file on purpose: it is the checklist of cyborg's trust boundaries, one numbered section each.

Cyborg's trust boundaries: host messages are signed by the host they are from and count only for
that host's steps; refusals of unverifiable payloads fail nothing; a real action runs only with the
journal on disk; an envelope the host never started is not "finished" by a power cycle; parameters
cannot smuggle options into a command line; local firmware images come from one directory and
the checked copy is what is flashed; a restart counts as completion only after the action asked for it."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.agent.config import AgentConfig
from checker.agent.worker import CheckLoop
from core.auth import issue_token
from core.db import Database
from core.dispatch import pending_tasks
from core.models import AuditEntry, Role
from core.queue import create_celery
from core.settings import Settings
from cyborg import actions as cyborg_actions
from cyborg.central import DELIVERY_GRACE_S
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.linux import KEXEC_DISABLED, OSRELEASE, LinuxDriver
from cyborg.envelope import Envelope, Signer
from cyborg.host import journal as journal_module
from cyborg.host.agent import executor_for_agent
from cyborg.host.executor import REFUSAL_TASK, RESULT_TASK, STARTED_TASK, CeleryReporter, HostExecutor
from cyborg.host.journal import JOURNAL_FILE, Journal, JournalEntry
from remediator import deadlines, host_results, runner
from remediator.hostauth import HostKeys
from remediator.models import Remediation, RemediationState, StepState
from remediator.tasks import open_host_message
from tests.builders.envelopes import NOW, envelope
from tests.builders.remediations import plan, remediation_of, result, sent_envelopes
from tests.builders.reports import T0
from tests.builders.runtime import rewire
from tests.conftest import samples_dir
from tests.cyborg.helpers import RecordedSystem, Reports, sim_executor


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def credential(database: Database, hostname: str) -> str:
    with database.session() as session:
        _, raw = issue_token(session, name=f"{hostname} agent", role=Role.viewer, hostname=hostname)
    return raw


def audited(session: Session, action: str) -> list[AuditEntry]:
    return list(session.scalars(select(AuditEntry).where(AuditEntry.action == action).order_by(AuditEntry.id)))


# -- 1. host -> central messages are the host's own ------------------------------------------------


def test_a_signed_message_opens_only_with_its_hosts_live_credential(db: Database, session: Session) -> None:
    token = credential(db, "h0")
    other = credential(db, "h1")
    keys = HostKeys(db, ttl_s=0.0, miss_reload_s=0.0)
    report = {"hostname": "h0", "envelope_id": "e-1", "step": 0, "outcome": "succeeded"}
    args = CeleryReporter(None, hostname="h0", token=token).message(report)
    assert open_host_message(session, "remediator.step_result", *args, keys=keys, required=True) == (report, "h0")

    body, signature = args
    tampered = body.replace("succeeded", "failed")
    forged_by_h1 = CeleryReporter(None, hostname="h0", token=other).message(report)  # h1's key, claiming h0
    for bad in ([tampered, signature], forged_by_h1, [report, signature], [body, "h0"], ["[1, 2]", None]):
        assert open_host_message(session, "remediator.step_result", *bad, keys=keys, required=True) is None
    unsigned = [report, None]
    assert open_host_message(session, "remediator.step_started", *unsigned, keys=keys, required=True) is None
    assert open_host_message(session, "remediator.step_started", *unsigned, keys=keys, required=False) == (
        report,
        None,
    )
    refused = audited(session, "cyborg.message.refused")
    assert len(refused) == 6
    assert refused[0].reason == "signature does not match any live credential of host 'h0'"
    assert refused[-1].reason.startswith("unsigned: signatures are required")
    assert refused[-1].detail == {"task": "remediator.step_started"}


def test_results_and_starts_count_only_from_the_remediations_own_host(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [sent] = sent_envelopes(session)
    step = remediation.steps[0]
    # Another host that read h0's queue knows the envelope id: with its own credential it is still h1.
    as_h1 = {**result(sent, "failed"), "hostname": "h1"}
    assert host_results.record_host_result(session, as_h1, rs, T0, signer="h1") == "unmatched"
    assert host_results.record_host_result(session, result(sent, "failed"), rs, T0, signer="h1") == "unmatched"
    assert host_results.record_host_started(session, {**result(sent), "accepted_at": "x"}, T0, signer="h1") == "ignored"
    assert (step.state, step.accepted_at) == (StepState.running, None)
    # Unsigned (signatures not required): the host it names must be the remediation's.
    assert host_results.record_host_result(session, as_h1, rs, T0) == "unmatched"
    assert step.state == StepState.running
    [unmatched, *_] = audited(session, "cyborg.result.unmatched")
    assert unmatched.detail["signer"] == "h1"

    # h0 itself: started once — a second notice does not put the deadline off.
    first = host_results.record_host_started(session, {**result(sent), "accepted_at": "x"}, T0, signer="h0")
    deadline = step.deadline
    later = T0 + dt.timedelta(minutes=10)
    again = host_results.record_host_started(session, {**result(sent), "accepted_at": "y"}, later, signer="h0")
    assert (first, again, step.deadline, step.accepted_at) == ("started", "ignored", deadline, T0)
    assert host_results.record_host_result(session, result(sent), rs, T0, signer="h0") == "succeeded"
    assert step.state == StepState.succeeded


def test_a_refusal_of_an_unverified_payload_fails_no_step(
    session: Session,
    cyborg_installed: dict[str, Any],
) -> None:
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [sent] = sent_envelopes(session)
    refusal = {
        "hostname": "h0",
        "code": "bad_signature",
        "reason": "the signature does not match the payload",
        "remediation_id": remediation.id,
        "step": 0,
        "envelope_id": sent["id"],  # a tampered copy of the genuine envelope carries its real ids
        "action": "reboot",
        "verified": False,
    }
    assert host_results.record_refusal(session, refusal, rs, T0, signer="h0") == "recorded"
    verified = {**refusal, "code": "expired", "verified": True}
    assert host_results.record_refusal(session, verified, rs, T0, signer="h1") == "recorded"  # not h1's step
    assert remediation.steps[0].state == StepState.running
    assert host_results.record_refusal(session, verified, rs, T0, signer="h0") == "failed"
    assert remediation.state == RemediationState.failed
    assert [e.detail["verified"] for e in audited(session, "cyborg.envelope.refused")] == [False, True, True]


def test_the_host_says_which_refusals_it_verified_and_signs_what_it_sends(signer: Signer) -> None:
    executor, _, reports = sim_executor(signer)
    message = signer.sign(envelope("tune_error_reporting")).model_dump()
    payload = json.loads(message["payload"])
    payload["params"] = {"edac_poll_s": 1}
    tampered = {**message, "payload": json.dumps(payload, sort_keys=True, separators=(",", ":"))}
    assert executor.handle(tampered)["refused"] == "bad_signature"
    assert executor.handle(signer.sign(envelope(hostname="sim-2")).model_dump())["refused"] == "wrong_host"
    assert [(r["code"], r["verified"]) for r in reports.of(REFUSAL_TASK)] == [
        ("bad_signature", False),
        ("wrong_host", True),
    ]

    sent: list[tuple[str, list[Any]]] = []

    class App:
        def send_task(self, task: str, *, args: list[Any], queue: str) -> None:
            sent.append((task, args))

    executor.reporter = CeleryReporter(App(), hostname="sim-1", token="ffx_host-token")
    executor.handle(signer.sign(envelope("tune_error_reporting")).model_dump())
    assert [task for task, _ in sent] == [STARTED_TASK, RESULT_TASK]
    body, signature = sent[-1][1]
    assert json.loads(body)["outcome"] == "succeeded"
    from core.signing import report_key, verify_report

    assert signature["host"] == "sim-1"
    assert verify_report(report_key("ffx_host-token"), body.encode(), signature["sig"])


# -- 2. a real action runs only with the journal on disk ---------------------------------------------


def linux_executor(tmp_path: Path, journal: Journal) -> tuple[HostExecutor, RecordedSystem, Reports]:
    system = RecordedSystem(files={"/proc/sys/kernel/random/boot_id": "b-1\n"}, tools={"systemctl"})
    reports = Reports()
    executor = HostExecutor(
        "sim-1",
        verifier=None,
        driver=LinuxDriver(system, work_dir=tmp_path, poll_s=0.01),
        journal=journal,
        reporter=reports,
        system=system,
        clock=lambda: NOW + dt.timedelta(seconds=1),
    )
    return executor, system, reports


def test_without_the_journal_on_disk_real_actions_are_refused(signer: Signer, tmp_path: Path) -> None:
    executor, system, reports = linux_executor(tmp_path, Journal(None))
    executor.verifier = signer.verifier()
    message = signer.sign(envelope("reboot", {"mode": "cold"}, timeout_s=1)).model_dump()
    assert executor.handle(message)["refused"] == "no_journal"
    assert system.ran == []
    [refusal] = reports.of(REFUSAL_TASK)
    assert (refusal["code"], refusal["verified"]) == ("no_journal", True)  # reported: the step fails centrally
    on_disk, system2, _ = linux_executor(tmp_path, Journal(tmp_path / JOURNAL_FILE))
    on_disk.verifier = signer.verifier()
    on_disk.handle(message)
    assert ["systemctl", "reboot"] in system2.ran


def test_an_agent_whose_state_directory_another_agent_holds_refuses_real_actions(
    signer: Signer, tmp_path: Path
) -> None:
    (tmp_path / "action.pub").write_bytes(signer.public_pem())
    config = AgentConfig(state_dir=tmp_path / "state", action_public_key=tmp_path / "action.pub", driver="linux")
    app = create_celery("memory://", make_current=False)
    held = CheckLoop(app, "sim-1", 60, config)
    second = CheckLoop(app, "sim-1", 60, config)
    try:
        executor = executor_for_agent(second)
        executor.reporter = reports = Reports()
        now = dt.datetime.now(dt.UTC)
        outcome = executor.handle(signer.sign(envelope("reboot", issued_at=now)).model_dump())
        assert outcome["refused"] == "no_journal"
        assert outcome["reason"].startswith("the journal is not on disk")
        assert reports.of(REFUSAL_TASK)[0]["code"] == "no_journal"
        assert executor_for_agent(held).journal.durable
    finally:
        second.stop()
        held.stop()


def test_the_journal_fsyncs_its_directory_after_the_rename(
    tmp_path: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.path.isdir(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(journal_module.os, "fsync", fsync)
    journal = Journal(tmp_path / JOURNAL_FILE)
    journal.put(JournalEntry.accept(envelope(), boot_id="b-1", now=NOW))
    assert synced == [False, True]  # the file, then its directory (the rename)


# -- 3. envelopes the host never started -----------------------------------------------------------


def test_an_envelope_outlives_its_expiry_on_the_broker_so_the_host_can_refuse_it(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
) -> None:
    rs, remediation = plan(session, ["reboot"])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    [signature] = [s for s in pending_tasks(session) if s.task == "cyborg.run_action"]
    envelope_ = Envelope.model_validate_json(signature.args[0]["payload"])
    lifetime = (envelope_.expires_at - envelope_.issued_at).total_seconds()
    assert lifetime == settings.action_expires_s
    assert signature.options["expires"] == settings.action_expires_s + DELIVERY_GRACE_S > lifetime


def test_a_step_the_host_never_started_is_escalated_not_power_cycled(
    session: Session,
    cyborg_installed: dict[str, Any],
    settings: Settings,
) -> None:
    from checker.sim.standalone import standalone_host
    from cyborg.central import CentralCyborg
    from cyborg.drivers.bmc import SimulatedBmc

    virtual = standalone_host("h0")
    cycled: list[str] = []
    rewire(session, cyborg=CentralCyborg(settings, bmc=SimulatedBmc({"h0": virtual}, on_boot=cycled.append)))
    rs, remediation = plan(session, ["reboot"], escalation=[["ticket"]])
    runner.advance(session, remediation.id, ruleset=rs, now=T0)
    step = remediation.steps[0]
    deadline = step.deadline
    assert deadline is not None
    assert deadlines.check_deadlines(session, rs, deadline + dt.timedelta(seconds=1)) == 1
    assert cycled == []
    assert "power_cycled" not in step.result
    assert step.power_cycled_at is None
    assert step.state == StepState.failed
    assert step.result["error"].startswith("not started by h0")
    assert remediation.state == RemediationState.failed
    nxt = remediation_of(session, "h0")
    assert nxt.id != remediation.id
    assert [s.action for s in nxt.steps] == ["ticket"]
    assert "was not started by h0 before its envelope expired" in nxt.reason
    assert session.get_one(Remediation, remediation.id).state == RemediationState.failed


# -- 4. parameters cannot become options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "params"),
    [
        ("install_kernel", {"release": "6.1.0", "package": "--setopt=gpgcheck=0"}),
        ("install_kernel", {"release": "-r"}),
        ("install_kernel", {"release": "6.1.0\n"}),
        ("reflash_firmware", {"component": "bmc", "version": "--force"}),
        ("reflash_firmware", {"component": "nic:-s", "version": "1.0"}),
        ("reflash_firmware", {"component": "disk:/dev/-x", "version": "1.0"}),
        ("reflash_firmware", {"component": "bmc", "version": "1.0", "image": "/srv/fw/../../etc/shadow"}),
        ("reflash_firmware", {"component": "bmc", "version": "1.0", "image": "http://fw.example/bmc.bin"}),
        ("reflash_firmware", {"component": "bmc", "version": "1.0", "image": "relative/bmc.bin"}),
        ("hard_ppr", {"dimm": "--all"}),
        ("hard_ppr", {"dimm": "A" * 200}),
        ("hard_ppr", {"dimm": "CPU0;reboot"}),
        ("set_interleave_weights", {"weights": {"../../../power/state": 5}}),
        ("set_interleave_weights", {"weights": {"12345": 5}}),
        ("set_interleave_weights", {"weights": {"0": 0}}),
        ("set_interleave_weights", {"weights": {"0": 256}}),
    ],
)
def test_parameters_that_could_reach_a_command_line_as_options_are_refused(action: str, params: dict[str, Any]) -> None:
    with pytest.raises(cyborg_actions.ActionRefused, match="bad parameters"):
        cyborg_actions.ACTIONS[action].parse(params)


def test_real_names_still_pass() -> None:
    for dimm in ("CPU_SrcID#1_MC#3_Chan#0_DIMM#0", "mc#0csrow#0channel#0", "CPU 0 DIMM 8", "P1-DIMMA1"):
        cyborg_actions.ACTIONS["hard_ppr"].parse({"dimm": dimm})
    cyborg_actions.ACTIONS["install_kernel"].parse({"release": "2.6.23.17-amdpatch", "package": "kernel=5.14.0-1~el9"})
    cyborg_actions.ACTIONS["set_interleave_weights"].parse({"weights": {"0": 5, "2": 1, "1023": 255}})
    cyborg_actions.ACTIONS["reflash_firmware"].parse(
        {"component": "nic:eth0", "version": "28.39.1002", "image": "/srv/firmware/nic/fw-1.bin", "sha256": "a" * 64}
    )


def reflash(driver: LinuxDriver, image: str, digest: str) -> dict[str, Any]:
    spec = cyborg_actions.ACTIONS["reflash_firmware"]
    params = spec.parse({"component": "bmc", "version": "1.43", "image": image, "sha256": digest})
    return driver.run(spec, params, ActionContext(driver.system, timeout_s=30))


def test_local_images_come_only_from_the_firmware_directory_as_regular_files(tmp_path: Path) -> None:
    store = tmp_path / "images"
    store.mkdir()
    (store / "zero").symlink_to("/dev/zero")
    os.mkfifo(store / "pipe")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    digest = "0" * 64
    system = RecordedSystem()
    system.answer(["ipmitool", "mc", "info"], "", 1)
    driver = LinuxDriver(system, work_dir=tmp_path / "state", firmware_dir=store, poll_s=0.01, bmc_wait_s=0)
    for image, why in [
        ("/dev/zero", "not inside the firmware directory"),
        (str(store / "zero"), "not inside the firmware directory"),  # a link out of it
        (str(outside), "not inside the firmware directory"),
        (str(store / "pipe"), "not a regular file"),  # and it does not hang
        (str(store / "missing.bin"), "cannot read image"),
    ]:
        with pytest.raises(ActionFailed, match=why):
            reflash(driver, image, digest)
    unconfigured = LinuxDriver(system, work_dir=tmp_path / "state", poll_s=0.01)
    with pytest.raises(ActionFailed, match="FLEETFIX_AGENT_FIRMWARE_DIR is not set"):
        reflash(unconfigured, str(outside), digest)
    assert not any(argv[0] == "fwupdmgr" for argv in system.ran)


def test_the_checked_copy_is_what_is_flashed(tmp_path: Path) -> None:
    store = tmp_path / "images"
    store.mkdir()
    data = b"capsule-1.43"
    (store / "bmc.bin").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    system = RecordedSystem()
    mc_old = (samples_dir() / "ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt").read_text(encoding="utf-8")
    mc_new = mc_old.replace("Firmware Revision         : 1.17", "Firmware Revision         : 1.43")
    for stdout in (mc_old, mc_new, mc_new):  # before; answering again after the flash; after
        system.answer(["ipmitool", "mc", "info"], stdout)
    driver = LinuxDriver(system, work_dir=tmp_path / "state", firmware_dir=store, poll_s=0.01)
    changed = reflash(driver, str(store / "bmc.bin"), digest)
    [flash] = [argv for argv in system.ran if argv[0] == "fwupdmgr"]
    copy = Path(flash[-1])
    assert copy == tmp_path / "state" / "firmware" / f"{digest}.img"
    assert copy.read_bytes() == data
    assert changed["targets"][0]["flashed"] is True
    (store / "bmc.bin").write_bytes(b"evil")  # the original changing later does not touch the checked copy
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest


# -- 5. completion across a restart only after the action asked for it ------------------------------


def test_an_unrelated_reboot_during_hard_ppr_capture_is_reported_interrupted(signer: Signer, tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    _, driver, _ = sim_executor(signer, journal=journal, faults=("dimm_ce_moderate",))
    dimm = driver.host.dimms[0].locator
    message = signer.sign(envelope("hard_ppr", {"dimm": dimm})).model_dump()
    entry = JournalEntry.accept(Envelope.model_validate_json(message["payload"]), boot_id=driver.boot_id(), now=NOW)
    journal.put(entry)  # accepted; capturing in firmware-first mode when the agent died ...
    driver.host.reboot()  # ... and the host rebooted for a reason of its own
    restarted, driver2, reports2 = sim_executor(signer, journal=Journal(tmp_path / JOURNAL_FILE))
    driver2.host = driver.host
    assert restarted.resume() == 1
    [report] = reports2.of(RESULT_TASK)
    assert report["outcome"] == "interrupted"
    assert "before the action asked it to" in report["commands"][0]["output"]
    assert driver2.applied == []


def test_the_journal_records_the_restart_before_it_is_issued(signer: Signer, tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    executor, _, _ = sim_executor(signer, journal=journal)
    reboot = envelope("reboot", {"mode": "warm"})
    tune = envelope("tune_error_reporting")
    for sent in (reboot, tune):
        executor.handle(signer.sign(sent).model_dump())
    on_disk = json.loads((tmp_path / JOURNAL_FILE).read_text())["entries"]
    assert on_disk[str(reboot.id)]["restart_issued_at"] is not None
    assert on_disk[str(tune.id)]["restart_issued_at"] is None

    marks: list[list[list[str]]] = []
    system = RecordedSystem(files={KEXEC_DISABLED: "1\n", OSRELEASE: "6.1.0\n"}, tools={"systemctl"})
    ctx = ActionContext(system, timeout_s=30, on_restart=lambda: marks.append(list(system.ran)))
    LinuxDriver(system, work_dir=tmp_path).run(
        cyborg_actions.ACTIONS["reboot"], cyborg_actions.RebootParams(mode="cold"), ctx
    )
    assert marks == [[]]  # called once, before `systemctl reboot` ran
    assert system.ran == [["systemctl", "reboot"]]
