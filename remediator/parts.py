"""Which part a rule's fault is about: by the signal's kind, and by the part types its ticket steps name.

Shared by the evaluator (a rule about a device fires once per device: remediator.evaluate) and the
repair side (a detection reaches the ticket of its part: remediator.repairs).
"""

from __future__ import annotations

from remediator.gpu_parts import ticket_part
from remediator.rules import Rule

SIGNAL_PART_TYPES = (
    ("dimm_", "dimm"),
    ("sel_memory_", "dimm"),
    ("bmc_dimm_", "dimm"),  # the BMC's own DIMM counts and alarms (remediator/derive/redfish.py)
    ("cmci_storm", "dimm"),
    ("edac_noinfo_", "dimm"),
    ("mce_memory_", "dimm"),
    ("mce_cpu_", "cpu"),
    ("psu_input_", "power_feed"),
    ("smart_", "disk"),
    ("nvme_", "disk"),
    ("psu_", "psu"),
    ("fan_", "fan"),
    ("gpu_", "gpu"),
    ("cxl_poison", "cxl_memory"),
    ("cxl_media_", "cxl_memory"),
    ("cxl_aer", "cxl_memory"),
    ("cxl_health", "cxl_memory"),  # Memory Module records: the device's own health and temperature
    ("cxl_device_down", "cxl_memory"),  # the kernel's CXL lines, named by the device's serial
)
"""Signal kinds by prefix, and the part they are about; any other signal is about the host."""


def signal_part_type(kind: str) -> str:
    return next((part_type for prefix, part_type in SIGNAL_PART_TYPES if kind.startswith(prefix)), "host")


DEVICE_PART_TYPES = frozenset(
    {
        "dimm",
        "disk",
        "nic",
        "pcie_device",
        "gpu",
        "nvswitch",
        "cxl_memory",
        "cpu",
        "fan",
        "psu",
        "power_feed",
        "filesystem",
    }
)
"""Parts a technician services one at a time, each with its own ticket: a rule about one fires for each of them
a report shows (two ports down, two GPUs off the bus), not only for the worst. The others are about the host as
a whole (host, airflow, power, capacity, kernel, hardware_class) or its owners (workload): one firing per
report, on the highest signal, as before."""


EVENT_SIGNALS = frozenset(
    {
        "gpu_xid",
        "gpu_sxid",
        "device_event_count",
        "kernel_event_count",
        "cxl_device_down",
        "cxl_port_error",
        "cxl_poison",
        "cxl_media_error",
        "cxl_aer",
        "mce_memory_corrected",
        "mce_memory_uncorrected",
        "mce_cpu_corrected",
        "mce_cpu_uncorrected",
        "sel_memory_ecc",
        "sel_processor_fault",
        "sel_critical_interrupt",
        "dimm_ue",
    }
)
"""Signals counted from events a report brings (log lines, SEL entries, rasdaemon rows, counters that moved):
the next report does not repeat them, so a firing of one that is held is lost (remediator.policies
ticket_for_a_lost_event). Naming a level signal here only turns a held fix into a ticket; leaving an event
signal out loses a device's fault, so the list errs on the side of naming. A rule with a window re-fires from
its kept samples (mce-cpu-core-corrected's day), so it is never judged lost (`lost_if_held`). Not
`page_ce_count`: a page held behind another page's offlining fires again with its next errors, and a page is
no part to ticket (tests/decisions/cases_pages_review.py: held, then planned)."""

HOST_SCOPE_ACTIONS = frozenset({"reboot", "power_cycle", "reflash_firmware", "install_kernel", "reimage"})
"""Actions on the whole host: a plan holding one fixes (or fails to fix) every device of the host at once."""


def part_key(rule: Rule, subject: str) -> str:
    """The part a subject of this rule names, in one form: a GPU signal names its GPU `gpu2 00000000:3B:00.0`
    when nvidia-smi lists it and by the kernel's `0000:3b:00.0` when not; both are one GPU (its locator)."""
    types = ticket_part_types(rule) | {signal_part_type(rule.when.signal)}
    return ticket_part("gpu", subject) if "gpu" in types else subject


def same_part(rule: Rule, a: str, b: str) -> bool:
    return a == b or part_key(rule, a) == part_key(rule, b)


def acts_on_the_host(rule: Rule) -> bool:
    """A step of the rule, at any rung, acts on the whole host (a reboot, a power cycle, a reimage)."""
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    return any(step.action in HOST_SCOPE_ACTIONS for step in steps)


def lost_if_held(rule: Rule) -> bool:
    """A firing of this rule held now does not come back: its signal is counted from events and the rule
    keeps no window of them."""
    return rule.when.signal in EVENT_SIGNALS and not rule.when.window_s


def ticket_part_types(rule: Rule) -> frozenset[str]:
    """The part types the rule's ticket steps name at any rung (the runner's default is host); a rule with no
    ticket step tickets at the end of its ladder (policies.ladder_end: dimm for DIMM signals, else host)."""
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    named = {str(s.params.get("part_type") or "host") for s in steps if s.action == "ticket"}
    if not named:
        named.add("dimm" if rule.when.signal.startswith("dimm") else "host")
    return frozenset(named)


_PER_DEVICE: dict[int, tuple[Rule, bool]] = {}  # by the rule object's id, the rule kept so the id stays its own


def fires_per_device(rule: Rule) -> bool:
    """The rule's fault is about a device and its ticket is keyed by the signal, not by a fixed `part` (the heat
    rules' `part: host`): it fires once per device. About a device: the part types its ticket steps name,
    or where it has none, its signal's part. Asked for
    every rule of every report: answered once per rule object."""
    known = _PER_DEVICE.get(id(rule))
    if known is not None and known[0] is rule:
        return known[1]
    if len(_PER_DEVICE) >= 4096:  # packs reloaded many times: start again
        _PER_DEVICE.clear()
    answer = _fires_per_device(rule)
    _PER_DEVICE[id(rule)] = (rule, answer)
    return answer


def _fires_per_device(rule: Rule) -> bool:
    steps = [step for plan in (rule.plan, *(rung.plan for rung in rule.escalation)) for step in plan]
    tickets = [step for step in steps if step.action == "ticket"]
    if any(step.params.get("part") and "{" not in str(step.params["part"]) for step in tickets):
        return False  # one ticket for the host (`part: host`)
    if tickets:  # its tickets say what it is about (nvme-temperature's is airflow: one for the host's drives)
        return bool(ticket_part_types(rule) & DEVICE_PART_TYPES)
    return signal_part_type(rule.when.signal) in DEVICE_PART_TYPES  # the ladder ends in its signal's part
