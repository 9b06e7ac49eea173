"""The host executor: verify a signed envelope, journal it, run it through the driver, report.

An envelope runs only if it is signed by the central key, meant for this host, not expired, its
action on this host's allow-list and its parameters valid; it runs at most once (the journal, which
must be on disk for a real driver). Every refusal and every result goes to the central service by
task name on the `remediate` queue (the host imports nothing central): `remediator.action_refused`,
`remediator.step_started` (so the central deadline counts from when the host began),
`remediator.step_result` — signed with the host's own credential, as its reports are.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from core.signing import report_key, sign_report
from cyborg.actions import HOST_ACTIONS, ActionParams, ActionRefused, CyborgAction, lookup
from cyborg.commands import ActionContext, ActionFailed, ActionTimedOut, System
from cyborg.drivers.base import Driver, HostWentDown
from cyborg.envelope import Envelope, Refused, Verifier
from cyborg.host.journal import Journal, JournalEntry, runner_alive, this_process

log = logging.getLogger(__name__)

RESULT_TASK = "remediator.step_result"
STARTED_TASK = "remediator.step_started"
REFUSAL_TASK = "remediator.action_refused"


class Reporter(Protocol):
    def send(self, task: str, report: dict[str, Any]) -> None: ...


class CeleryReporter:
    """Reports as tasks on the central `remediate` queue, by name.

    With the host's credential (FLEETFIX_AGENT_TOKEN or _TOKEN_FILE) each message is the report's
    JSON text and `{"host", "sig"}`, signed as the agent signs its reports (core.signing), so the
    central side knows which host speaks; without one it is the report itself, unsigned (accepted
    only where signatures are not required)."""

    def __init__(self, app: Any, *, hostname: str = "", token: str = "") -> None:
        self.app = app
        self.hostname = hostname
        self._key = report_key(token) if token else None

    def message(self, report: dict[str, Any]) -> list[Any]:
        """The task's arguments for one report."""
        if self._key is None:
            return [report]
        body = json.dumps(report, sort_keys=True, separators=(",", ":"))
        return [body, {"host": self.hostname, "sig": sign_report(self._key, body.encode())}]

    def send(self, task: str, report: dict[str, Any]) -> None:
        from core.queue import REMEDIATE_QUEUE

        self.app.send_task(task, args=self.message(report), queue=REMEDIATE_QUEUE)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class HostExecutor:
    def __init__(
        self,
        hostname: str,
        *,
        verifier: Verifier | None,
        driver: Driver,
        journal: Journal,
        reporter: Reporter,
        allowed: Iterable[str] = HOST_ACTIONS,
        system: System | None = None,
        clock: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        allowed = set(allowed)
        unknown = sorted(allowed - set(HOST_ACTIONS))
        if unknown:
            raise ActionRefused(f"allowed actions: {', '.join(unknown)} not host actions (known: {HOST_ACTIONS})")
        self.hostname = hostname
        self.verifier = verifier
        self.driver = driver
        self.journal = journal
        self.reporter = reporter
        self.allowed = allowed
        self.system = system
        self.clock = clock

    # -- one envelope ---------------------------------------------------------------------

    def handle(self, message: Any) -> dict[str, Any]:
        """The `cyborg.run_action` task: returns a short summary (the full report goes centrally)."""
        now = self.clock()
        try:
            envelope, action, params = self._admit(message, now)
        except Refused as refusal:
            return self._refuse(refusal, now)
        with self.journal.lock:
            entry = self.journal.get(str(envelope.id))
            if entry is None:
                entry = JournalEntry.accept(envelope, boot_id=self.driver.boot_id(), now=now)
                self.journal.put(entry)
                self.reporter.send(
                    STARTED_TASK,
                    {
                        "envelope_id": entry.id,
                        "hostname": entry.hostname,
                        "remediation_id": entry.remediation_id,
                        "step": entry.step,
                        "action": entry.action,
                        "accepted_at": entry.accepted_at,
                        "boot_id": entry.boot_id_before,  # the boot it starts in
                    },
                )
            elif entry.state == "finished":
                if entry.reported:
                    replayed = Refused("replayed", f"envelope {envelope.id} already ran", envelope, verified=True)
                    return self._refuse(replayed, now)
                self._send_result(entry)
                return {"outcome": entry.report.get("outcome"), "resent": True}
            elif runner_alive(entry.runner) and self.driver.boot_id() == entry.boot_id_before:
                # The same envelope delivered again while it runs (a redelivery, a second worker):
                # not a crash to recover from; the running one reports.
                running = Refused(
                    "in_flight",
                    f"envelope {envelope.id} is running now (process {entry.runner}): not started twice",
                    envelope,
                    verified=True,
                )
                return self._refuse(running, now)
            else:
                return self._recover(entry, action, params)
            entry.runner = this_process()  # before the lock is let go: a duplicate finds it in flight
            self.journal.put(entry)
        return self._execute(entry, action, params)

    def _admit(self, message: Any, now: dt.datetime) -> tuple[Envelope, CyborgAction, ActionParams]:
        if self.verifier is None:
            raise Refused("no_key", "no action public key configured (FLEETFIX_AGENT_ACTION_PUBLIC_KEY)")
        envelope = self.verifier.open(message, hostname=self.hostname, now=now)
        if envelope.action not in self.allowed:
            raise Refused(
                "not_allowed", f"{envelope.action!r} is not on this host's allow-list", envelope, verified=True
            )
        try:
            action = lookup(envelope.action)
            params = action.parse(envelope.params)
        except ActionRefused as error:
            raise Refused("bad_params", str(error), envelope, verified=True) from None
        if not self.journal.durable and self.driver.name != "simulated":
            # In memory, a redelivery after a restart would find no trace and run the action again.
            raise Refused(
                "no_journal",
                "the journal is not on disk (FLEETFIX_AGENT_STATE_DIR unusable or held by another agent): "
                "real actions run only when the host can remember what it ran",
                envelope,
                verified=True,
            )
        return envelope, action, params

    def _refuse(self, refusal: Refused, now: dt.datetime) -> dict[str, Any]:
        claimed = refusal.envelope
        report: dict[str, Any] = {
            "hostname": self.hostname,
            "code": refusal.code,
            "reason": str(refusal),
            "at": now.isoformat(),
            "verified": refusal.verified,  # whether the ids below are the central service's or only claimed
            "envelope_id": str(claimed.id) if claimed else None,
            "remediation_id": claimed.remediation_id if claimed else None,
            "step": claimed.step if claimed else None,
            "action": claimed.action if claimed else None,
        }
        log.warning("cyborg.envelope.refused", extra={"fields": report})
        self.reporter.send(REFUSAL_TASK, report)
        return {"refused": refusal.code, "reason": str(refusal)}

    # -- running --------------------------------------------------------------------------

    def _context(self, entry: JournalEntry, timeout_s: float | None = None) -> ActionContext:
        def restart_issued() -> None:
            entry.restart_issued_at = self.clock().isoformat()
            self.journal.put(entry)  # on disk before the restart command runs

        return ActionContext(
            self.system, timeout_s=timeout_s or entry.timeout_s, dry_run=entry.dry_run, on_restart=restart_issued
        )

    def _execute(self, entry: JournalEntry, action: CyborgAction, params: ActionParams) -> dict[str, Any]:
        ctx = self._context(entry)
        entry.runs += 1
        entry.runner = this_process()
        self.journal.put(entry)
        changed: dict[str, Any] = {}
        verified: dict[str, Any] = {}
        outcome, error = "succeeded", None
        log.info("cyborg.action.started", extra={"fields": {"action": entry.action, "envelope": entry.id}})
        try:
            changed = self.driver.run(action, params, ctx)
            if changed.get("restarting") and not entry.dry_run:
                self.driver.await_restart(action, ctx, entry.boot_id_before)
                verified = self.driver.verify(action, params, ctx, entry.boot_id_before)
        except HostWentDown as down:
            # A host that is down reports nothing; the central deadline notices, its BMC may bring it back.
            log.warning("cyborg.host.down", extra={"fields": {"action": entry.action, "why": str(down)}})
            return {"outcome": "host_down"}
        except ActionTimedOut as timeout:
            outcome, error = "timed_out", str(timeout)
        except ActionFailed as failure:
            outcome, error = "failed", str(failure)
            changed = getattr(failure, "findings", None) or changed  # what a failed verification found
        except Exception as crash:  # a driver bug must still end in a report, not a silent step
            log.exception("cyborg.driver.crashed", extra={"fields": {"action": entry.action}})
            outcome, error = "failed", f"driver error: {type(crash).__name__}: {crash}"
        return self._finish(entry, outcome, error, changed, verified, ctx)

    def _recover(self, entry: JournalEntry, action: CyborgAction, params: ActionParams) -> dict[str, Any]:
        """An entry still `running`: the agent stopped while it ran (or the host restarted under it).
        A new boot id means the action completed only if the action had asked for that restart (the
        journal says so); a host that restarted for another reason before then cut the action short."""
        boot_id = self.driver.boot_id()
        restarted = entry.boot_id_before is not None and boot_id != entry.boot_id_before
        if action.restarts and restarted and entry.restart_issued_at and not entry.dry_run:
            ctx = self._context(entry)
            ctx.note("resumed after the host restarted: verifying, not repeating", f"boot id {boot_id}")
            try:
                verified = self.driver.verify(action, params, ctx, entry.boot_id_before)
            except ActionFailed as failure:
                return self._finish(entry, "failed", str(failure), {}, {}, ctx)
            return self._finish(entry, "succeeded", None, {"completed_across_restart": True}, verified, ctx)
        if action.idempotent and self.clock() < dt.datetime.fromisoformat(entry.expires_at):
            log.info("cyborg.action.rerun", extra={"fields": {"action": entry.action, "envelope": entry.id}})
            return self._execute(entry, action, params)
        if action.idempotent:
            # Safe to repeat, but no longer ordered: the envelope expired (the plan may have been aborted
            # or moved on meanwhile), so nothing starts again after its time.
            ctx = self._context(entry)
            ctx.note("interrupted", f"the agent stopped while this ran; its envelope expired at {entry.expires_at}")
            return self._finish(
                entry, "interrupted", "interrupted, and its envelope expired: not run again", {}, {}, ctx
            )
        ctx = self._context(entry)
        if restarted:
            ctx.note("interrupted", f"the host restarted (boot id {boot_id}) before the action asked it to")
        else:
            ctx.note("interrupted", "the agent stopped while this ran and the host did not restart")
        return self._finish(entry, "interrupted", "interrupted while running; not safe to run twice", {}, {}, ctx)

    def _finish(
        self,
        entry: JournalEntry,
        outcome: str,
        error: str | None,
        changed: dict[str, Any],
        verified: dict[str, Any],
        ctx: ActionContext,
    ) -> dict[str, Any]:
        now = self.clock()
        entry.state = "finished"
        entry.finished_at = now.isoformat()
        entry.report = {
            "envelope_id": entry.id,
            "hostname": entry.hostname,
            "remediation_id": entry.remediation_id,
            "step": entry.step,
            "attempt": entry.attempt,
            "action": entry.action,
            "outcome": outcome,
            "error": error,
            "changed": changed,
            "verified": verified,
            "dry_run": entry.dry_run,
            "driver": self.driver.name,
            "runs": entry.runs,
            "accepted_at": entry.accepted_at,
            "finished_at": entry.finished_at,
            "boot_id_before": entry.boot_id_before,  # the boot it ran in: reports from it predate the action
            "commands": ctx.log.as_json(),
        }
        self.journal.put(entry)
        log.info(
            f"cyborg.action.{outcome}", extra={"fields": {"action": entry.action, "envelope": entry.id, "error": error}}
        )
        self._send_result(entry)
        return {"outcome": outcome, "error": error}

    def _send_result(self, entry: JournalEntry) -> None:
        self.reporter.send(RESULT_TASK, entry.report)
        entry.reported = True
        self.journal.put(entry)

    # -- after a start ----------------------------------------------------------------------

    def resume(self) -> int:
        """At agent start: finish what the last run left — results not sent, actions cut short."""
        handled = 0
        self.journal.prune(self.clock())
        for entry in self.journal.entries():
            if entry.state == "finished" and not entry.reported:
                self._send_result(entry)
                handled += 1
            elif entry.state == "running":
                try:
                    action = lookup(entry.action)
                    params = action.parse(entry.params)
                except ActionRefused as error:  # journal written by another version; say so, run nothing
                    ctx = self._context(entry)
                    self._finish(entry, "failed", f"cannot resume: {error}", {}, {}, ctx)
                else:
                    self._recover(entry, action, params)
                handled += 1
        return handled
