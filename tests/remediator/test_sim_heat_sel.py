"""A hot host's BMC logs its temperature thresholds (checker/sim/heat.py `log_thresholds`, issue 18): each upper
threshold a reading crossed, asserted once when it crosses and deasserted when it drops back, in `ipmitool sel
elist`'s form (the Intel S2600 sample's threshold pairs) or, on a Redfish class, the vendor's LogEntry; the
centre's sel_temperature_high reads the assertion, never the deassertion."""

from __future__ import annotations

import datetime as dt
import json
import re

from checker.parsers.ipmi_sel import parse_ipmitool_sel
from checker.schemas import SelEntry
from checker.sim import VirtualHost
from checker.sim.standalone import standalone_host
from remediator.derive.sel import classify
from tests.conftest import samples_dir

T0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
SAMPLE = "ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt"


def temperature_entries(host: VirtualHost, minutes: range) -> list[tuple[int, SelEntry]]:
    found = []
    for minute in minutes:
        report = host.report(T0 + dt.timedelta(minutes=minute))
        assert report.observations.sel is not None
        found += [(minute, e) for e in report.observations.sel.entries if e.sensor_type == "Temperature"]
    return found


def cool(host: VirtualHost) -> None:
    """The rack's cooling repaired: the host's readings fall back (heat.py reads the rack's heat only)."""
    host.rack_heat = None
    host.clear({"rack_hot"})


def test_a_hot_ipmi_host_logs_each_upper_threshold_once_then_deasserts_it() -> None:
    host = standalone_host("hot-1", hardware_class="compute-skx-2s", faults=["rack_hot"])
    hot = temperature_entries(host, range(6))
    assert [(m, e.sensor_name, e.event, e.direction) for m, e in hot] == [
        (0, f"CPU{n} Temp", f"Upper {level} going high", "asserted")
        for n in (1, 2)
        for level in ("Non-critical", "Critical")
    ]  # at the first report only: never again while it stays hot; the inlet (36 C) stays under its 40 C
    assert [classify(e) for _m, e in hot] == [None, "sel_temperature_high"] * 2  # non-critical is no heat rule's
    assert hot[1][1].raw.endswith("| Upper Critical going high  | Asserted | Reading 93 > Threshold 90 degrees C")
    cool(host)
    cooled = temperature_entries(host, range(6, 10))
    assert [(m, e.sensor_name, e.event, e.direction) for m, e in cooled] == [
        (6, f"CPU{n} Temp", f"Upper {level} going high", "deasserted")
        for n in (1, 2)
        for level in ("Critical", "Non-critical")  # the reverse of the assertions, as the sample's pairs
    ]
    assert [classify(e) for _m, e in cooled] == [None] * 4  # a recovery fires nothing


def test_a_cool_host_logs_no_temperature_entry() -> None:
    host = standalone_host("cool-1", hardware_class="compute-skx-2s")
    assert temperature_entries(host, range(5)) == []
    assert host.thresholds_asserted == {}


def test_the_lines_have_the_samples_shape() -> None:
    """Our line and a real Intel BMC's threshold line parse to the same fields (with going high for going low)."""
    sample = (samples_dir() / SAMPLE).read_text(encoding="utf-8")
    real = next(e for e in parse_ipmitool_sel(sample).value if e.sensor_type == "Temperature")
    host = standalone_host("hot-2", hardware_class="compute-skx-2s", faults=["rack_hot"])
    ours = temperature_entries(host, range(1))[0][1]
    assert (real.sensor_type, real.event, real.direction) == ("Temperature", "Lower Non-critical going low", "asserted")
    assert (ours.event, ours.direction) == ("Upper Non-critical going high", "asserted")
    reading = re.compile(r"^Reading \d+ [<>] Threshold \d+ degrees C$")
    for raw in (real.raw, ours.raw):
        columns = [c.strip() for c in raw.split("|")]
        assert (len(columns), columns[3].split(" ")[0], columns[5]) == (7, "Temperature", "Asserted"), raw
        assert reading.match(columns[6]), raw
    assert "low  |" in real.raw  # ipmitool's double space after a threshold event
    assert "high  |" in ours.raw


def test_a_dell_bmc_logs_its_cpus_critical_threshold_in_idracs_words() -> None:
    """iDRAC9 has no non-critical threshold on a CPU (the R650 Thermal sample): TMP0203, then TMP0205."""
    host = standalone_host("rf-hot-1", hardware_class="compute-icx-2s", faults=["rack_hot"])
    hot = temperature_entries(host, range(4))
    assert [(m, e.event, e.direction) for m, e in hot] == [
        (0, f"Upper Critical going high: CPU {n} temperature is greater than the upper critical threshold.", "asserted")
        for n in (1, 2)
    ]
    assert [json.loads(e.raw)["Severity"] for _m, e in hot] == ["Critical", "Critical"]
    assert [classify(e) for _m, e in hot] == ["sel_temperature_high"] * 2
    assert len({e.sensor_name for _m, e in hot}) == 2  # a sensor number each: two subjects
    cool(host)
    cooled = temperature_entries(host, range(4, 7))
    assert [(m, e.event, e.direction) for m, e in cooled] == [
        (4, f"CPU {n} temperature is within range.", "deasserted") for n in (1, 2)
    ]
    assert [classify(e) for _m, e in cooled] == [None, None]


def test_a_supermicro_bmc_logs_both_upper_thresholds() -> None:
    host = standalone_host("rf-hot-2", hardware_class="storage-epyc-1s", faults=["rack_hot"])
    hot = temperature_entries(host, range(3))
    assert [classify(e) for _m, e in hot] == [None, "sel_temperature_high"]  # a one-socket board
    assert all(e.direction == "asserted" and "CPU1 Temp" in e.event for _m, e in hot)
    cool(host)
    assert [e.direction for _m, e in temperature_entries(host, range(3, 5))] == ["deasserted"] * 2
