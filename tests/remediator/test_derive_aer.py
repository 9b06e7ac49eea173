"""PCIe AER from rasdaemon's aer_event rows where rasdaemon runs; never counted twice with the kernel
log's lines (the kernel prints, rate-limited, the errors rasdaemon records). Rows are ours, in rasdaemon's schema, for
the root port of the corpus's ACS-violation log."""

from __future__ import annotations

from checker.schemas import RasAerEvent, RasdaemonState
from remediator.signals import SignalValue
from tests.builders.observations import Deriver, at, event, kernel_log, of, report

PORT = "0000:80:1b.4"


def row(row_id: int, err_type: str = "Corrected", msg: str = "Receiver Error") -> RasAerEvent:
    return RasAerEvent(id=row_id, timestamp=None, dev_name=PORT, err_type=err_type, err_msg=msg)


def ras(*rows: RasAerEvent, top: int | None = None) -> RasdaemonState:
    last = top if top is not None else max((r.id for r in rows), default=0)
    return RasdaemonState(aer_events=list(rows), last_ids={"aer_event": last})


def devices(signals: list[SignalValue]) -> dict[tuple[str, str], float]:
    return {(s.detail["kind"], s.subject): s.value for s in of(signals, "device_event_count")}


def test_rows_stand_in_for_the_kernel_log_from_the_second_sight_on() -> None:
    run = Deriver()
    assert run(report(at(0), rasdaemon=ras(row(1), row(2)))) == []  # history: the cursor only
    signals = run(report(at(1), rasdaemon=ras(row(3), row(4, "Uncorrected (Non-Fatal)", "ACSViol"))))
    assert devices(signals) == {("pcie_aer_corrected", PORT): 1, ("pcie_aer_uncorrected", PORT): 1}
    (uncorrected,) = [s for s in of(signals, "device_event_count") if s.detail["kind"] == "pcie_aer_uncorrected"]
    assert uncorrected.detail["source"].startswith("rasdaemon aer_event")
    assert "ACSViol" in uncorrected.detail["lines"][0]
    # the same rows again (an agent that did not move its cursor): nothing new
    assert of(run(report(at(2), rasdaemon=ras(row(3), row(4, "Uncorrected (Non-Fatal)")))), "device_event_count") == []
    # they add up over the kind's window, as the kernel log's do
    again = run(report(at(3), rasdaemon=ras(row(5))))
    assert devices(again) == {("pcie_aer_corrected", PORT): 2}


def test_where_rasdaemon_runs_its_rows_are_the_count_and_the_log_lines_are_not_added() -> None:
    """The kernel rate-limits its AER lines; rasdaemon records every error once. With both, the rows count
    (three), not the rows plus the log's line (four); without rasdaemon the log counts."""
    aer_line = f"pcieport {PORT}: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"
    run = Deriver()
    run(report(at(0), rasdaemon=ras(row(1)), kernel_log=kernel_log()))
    logged = kernel_log(event("pcie_aer_corrected", seq=10, when=at(1), subject=PORT, lines=[aer_line]))
    signals = run(report(at(1), rasdaemon=ras(row(2), row(3), row(4)), kernel_log=logged))
    assert devices(signals) == {("pcie_aer_corrected", PORT): 3}
    assert of(signals, "device_event_count")[0].detail["source"] == "rasdaemon aer_event"
    alone = Deriver()
    alone(report(at(0), kernel_log=kernel_log()))
    signals = alone(report(at(1), kernel_log=logged))
    assert devices(signals) == {("pcie_aer_corrected", PORT): 1}
    assert "source" not in of(signals, "device_event_count")[0].detail


def test_rows_the_report_could_not_carry_make_the_count_a_floor() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras(row(1))))
    truncated = ras(row(700, "Uncorrected (Fatal)", "Surprise Down Error"), top=700).model_copy(
        update={"truncated": 600}
    )
    (signal,) = of(run(report(at(1), rasdaemon=truncated)), "device_event_count")
    assert (signal.detail["kind"], signal.detail["truncated"]) == ("pcie_aer_uncorrected", 600)


def test_a_recreated_database_is_read_from_its_start() -> None:
    run = Deriver()
    run(report(at(0), rasdaemon=ras(row(40))))
    signals = run(report(at(1), rasdaemon=ras(row(1, "Uncorrected (Fatal)", "Surprise Down Error"))))
    assert devices(signals) == {("pcie_aer_uncorrected", PORT): 1}
