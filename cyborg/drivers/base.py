"""What the host executor needs of a driver."""

from __future__ import annotations

from typing import Any, Protocol

from cyborg.actions import ActionParams, CyborgAction
from cyborg.commands import ActionContext, ActionFailed


class HostWentDown(ActionFailed):
    """The host stopped answering during the action (simulated: `stay_down`); nothing more is reported
    from it until it is power-cycled and its agent starts again."""


class VerificationFailed(ActionFailed):
    """A verification ran (or could not run) and did not pass; its `findings` travel with the step's result
    (the executor sends them as `changed`), so the ticket the failure leads to shows what was found."""

    def __init__(self, message: str, findings: dict[str, Any]) -> None:
        super().__init__(message)
        self.findings = findings


class Driver(Protocol):
    name: str

    def boot_id(self) -> str | None:
        """This boot's id (/proc/sys/kernel/random/boot_id): a restart changes it."""

    def run(self, action: CyborgAction, params: ActionParams, ctx: ActionContext) -> dict[str, Any]:
        """Check preconditions, carry the action out, verify what can be verified before any restart;
        return what changed. Raises ActionFailed (or ActionTimedOut)."""

    def await_restart(self, action: CyborgAction, ctx: ActionContext, boot_id_before: str | None) -> None:
        """After a `restarts` action: wait for the restart (a real host's agent dies during it)."""

    def verify(
        self, action: CyborgAction, params: ActionParams, ctx: ActionContext, boot_id_before: str | None
    ) -> dict[str, Any]:
        """After a `restarts` action, on the new boot: check it took (new boot id, the kernel, the
        firmware version) and finish what follows the boot; raises ActionFailed if it did not."""


def require_restarted(driver: Driver, boot_id_before: str | None) -> str:
    now = driver.boot_id()
    if boot_id_before is not None and now == boot_id_before:
        raise ActionFailed(f"the host did not restart (boot id still {now})")
    return now or ""
