"""Which BMC driver acts on a host: IPMI, Redfish, or both (Redfish first), by label, class or default.

The choice is per host (docs/cyborg.md, "BMC protocols"): a host's `bmc_protocol` label wins, then
FLEETFIX_BMC_PROTOCOL_BY_CLASS for its hardware class, then FLEETFIX_BMC_PROTOCOL. The Redfish driver is
built once per process and kept, so its session to each BMC is reused across actions; `close()` logs
them out.
"""

from __future__ import annotations

from typing import get_args

from cyborg.central.interfaces import Target
from cyborg.central.settings import BmcProtocol, CyborgSettings
from cyborg.commands import ActionFailed
from cyborg.drivers.bmc import Bmc, IpmitoolBmc
from cyborg.drivers.redfish import FallbackBmc, RedfishBmc
from cyborg.drivers.redfish_client import RedfishConfig

PROTOCOLS: tuple[str, ...] = get_args(BmcProtocol)


def redfish_config(settings: CyborgSettings) -> RedfishConfig:
    return RedfishConfig(
        username=settings.bmc_username,
        password_file=settings.bmc_password_file,
        verify_tls=settings.redfish_verify_tls,
        ca_file=settings.redfish_ca_file,
        system_id=settings.redfish_system_id,
        connect_timeout_s=settings.redfish_connect_timeout_s,
        read_timeout_s=settings.redfish_timeout_s,
        retries=settings.redfish_retries,
        power_wait_s=settings.redfish_power_wait_s,
        task_wait_s=settings.redfish_task_wait_s,
        content_addressed=settings.redfish_require_content_addressed,
    )


class BmcChoice:
    """The BMC drivers of one process, and which one a host gets."""

    def __init__(self, settings: CyborgSettings, *, redfish: RedfishBmc | None = None, ipmi: Bmc | None = None) -> None:
        self.settings = settings
        self._redfish = redfish
        self._ipmi = ipmi

    def protocol(self, target: Target) -> str:
        label = target.labels.get("bmc_protocol")
        if label:
            if label not in PROTOCOLS:
                raise ActionFailed(f"the host's bmc_protocol label is {label!r}, not one of {', '.join(PROTOCOLS)}")
            return str(label)
        by_class = self.settings.bmc_protocol_by_class.get(target.hardware_class) if target.hardware_class else None
        return by_class or self.settings.bmc_protocol

    @property
    def ipmi(self) -> Bmc:
        if self._ipmi is None:
            self._ipmi = IpmitoolBmc(self.settings.bmc_username, self.settings.bmc_password_file)
        return self._ipmi

    @property
    def redfish(self) -> RedfishBmc:
        if self._redfish is None:
            self._redfish = RedfishBmc(redfish_config(self.settings))
        return self._redfish

    def for_target(self, target: Target) -> Bmc:
        protocol = self.protocol(target)
        if protocol == "redfish":
            return self.redfish
        if protocol == "both":
            return FallbackBmc(self.redfish, self.ipmi)
        return self.ipmi

    def close(self) -> None:
        if self._redfish is not None:
            self._redfish.close()
