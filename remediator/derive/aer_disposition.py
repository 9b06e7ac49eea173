"""What an uncorrected PCIe AER error calls for: whether it is one a drain helps against.

An uncorrectable error is not always a failing part. Three kinds are told apart, from the error types
the record names (the kernel's '[21] ACSViol', older kernels' '[20] Unsupported Request', rasdaemon's
err_msg, the sysfs aer_dev_nonfatal/fatal per-type lines) and the lines logged with it:

- `config`: only ACS Violation and Unsupported Request. Both are a request the platform refused: a
  passthrough or ACS set-up that does not fit the device (Proxmox's ACSViol in the corpus), a driver
  touching what it should not. A person must look at the configuration; draining the host fixes nothing.
- `hot_unplug`: only a Surprise Down error, with pciehp's "Link Down" / "Card not present" for the
  slot: the card was pulled or lost power on a hot-plug slot. On a slot without hot-plug a Surprise Down
  is a dead link, and drains.
- `recovered`: a non-fatal error after which the kernel logged "AER: device recovery successful": the
  driver reset the function and it works. A fatal error drains even when recovered (the link was reset).

Anything else, and anything not known (a sysfs counter with no log line to say more), is `drain`. The
drain rule matches `disposition: drain`, the in-service ticket rule the other three. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DRAIN = "drain"
CONFIG_TYPES = frozenset({"ACSViol", "UnsupReq"})
UNPLUG_TYPES = frozenset({"SDES"})
# The older kernels' and rasdaemon's long names for the short ones (drivers/pci/pcie/aer.c, both wordings).
LONG_NAMES = {
    "ACS Violation": "ACSViol",
    "Unsupported Request": "UnsupReq",
    "Unsupported Request Error": "UnsupReq",
    "Surprise Down Error": "SDES",
    "Surprise Down": "SDES",
}
_TYPE = re.compile(r"\[\s*\d{1,2}\]\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s*(?:\((?:First)\))?\s*$")
_RECOVERED = re.compile(r"AER: device recovery successful")
_FAILED = re.compile(r"AER: device recovery failed|can't recover")
_UNPLUG = re.compile(r"pciehp.*(?:Link Down|Card not present)", re.IGNORECASE)


def short_name(name: str) -> str:
    name = name.strip()
    return LONG_NAMES.get(name, name)


def types_in(lines: Iterable[str]) -> set[str]:
    """The error types a kernel AER record's '[bit] Name' lines name."""
    found: set[str] = set()
    for line in lines:
        if (m := _TYPE.search(line)) is not None:
            found.add(short_name(m.group("name")))
    return found


def disposition(types: set[str], lines: list[str], *, fatal: bool) -> dict[str, object]:
    """The detail keys of an uncorrected signal: `disposition` and the flags it comes from."""
    config_only = bool(types) and types <= CONFIG_TYPES
    hot_unplug = bool(types) and types <= UNPLUG_TYPES and any(_UNPLUG.search(line) for line in lines)
    recovered = (
        not fatal and any(_RECOVERED.search(line) for line in lines) and not any(_FAILED.search(line) for line in lines)
    )
    if config_only:
        kind = "config"
    elif hot_unplug:
        kind = "hot_unplug"
    elif recovered:
        kind = "recovered"
    else:
        kind = DRAIN
    return {
        "disposition": kind,
        "config_only": config_only,
        "recovered": recovered,
        "hot_unplug": hot_unplug,
        "error_types": sorted(types),
    }


def is_fatal(lines: Iterable[str]) -> bool:
    """Whether a record's lines say Fatal (not Non-Fatal): 'severity=Uncorrected (Fatal)'."""
    return any(re.search(r"\((?:Fatal)\)|Uncorrected \(Fatal|Uncorrectable \(Fatal", line) for line in lines)


def merge(dispositions: list[dict[str, object]]) -> dict[str, object]:
    """Several records of one part in a report: any that drains makes the signal drain."""
    for item in dispositions:
        if item["disposition"] == DRAIN:
            return item
    return dispositions[0] if dispositions else disposition(set(), [], fatal=False)
