"""reset_gpu: the allow-list's parameters, what the centre fills in (the GPU from its signal, the drain it
confirmed), the real driver's nvidia-smi calls through a recorded system (refusals, a reset that leaves the
remap pending, a GPU that does not come back, a dry run), and the simulated driver on a GPU host."""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.samples import sample
from cyborg.actions import ACTIONS, HOST_ACTIONS, ActionRefused
from cyborg.central.issuing import resolve_params
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.linux import LinuxDriver
from cyborg.envelope import Signer
from remediator.actions import ACTIONS as CONTRACT
from tests.builders.envelopes import envelope
from tests.cyborg.helpers import RecordedSystem, sim_executor

A10G = "gpu/nvidia-smi-q-x-a10g-remapped-rows-histogram-v11.xml"  # 00000000:00:1E.0
UUID = "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
LISTED = f"GPU 0: NVIDIA A10G (UUID: {UUID})\n"
QUERY = ("nvidia-smi", "-q", "-x", "-i", "0")
DRAINED = {"drain": {"outcome": "succeeded", "commands": [{"kind": "hook", "argv": ["drain"]}]}}


def xml(*, pending: bool) -> str:
    text = sample(A10G)
    text = re.sub(r"<remapped_row_unc>0<", "<remapped_row_unc>4<", text)
    return re.sub(r"<remapped_row_pending>No<", f"<remapped_row_pending>{'Yes' if pending else 'No'}<", text)


def gpu_system(
    *, after_pending: bool = False, listed: str = LISTED, before: str | None = None, after: str | None = None
) -> RecordedSystem:
    system = RecordedSystem(tools={"nvidia-smi"})
    system.answer(list(QUERY), before if before is not None else xml(pending=True))
    system.answer(list(QUERY), after if after is not None else xml(pending=after_pending))
    system.answer(["nvidia-smi", "-L"], listed)
    return system


def changed_tag(text: str, tag: str, value: str) -> str:
    changed, count = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", text, count=1)
    assert count == 1, tag
    return changed


def reset(
    system: RecordedSystem, *, dry_run: bool = False, **params: object
) -> tuple[dict[str, object], ActionContext]:
    spec = ACTIONS["reset_gpu"]
    ctx = ActionContext(system, timeout_s=60, dry_run=dry_run)
    own = {"gpu": 0, "drained": True, **params}
    return LinuxDriver(system).run(spec, spec.parse(own), ctx), ctx


def test_resets_the_gpu_and_checks_the_remap_was_applied() -> None:
    system = gpu_system()
    changed, _ = reset(system, bdf="00000000:00:1E.0", uuid=UUID)
    assert system.ran == [list(QUERY), ["nvidia-smi", "-r", "-i", "0"], ["nvidia-smi", "-L"], list(QUERY)]
    assert (changed["bdf"], changed["serial"], changed["uuid"]) == ("00000000:00:1E.0", "0000000000000", UUID)
    assert changed["before"]["memory_repair"]["remap_pending"] is True  # type: ignore[index]
    assert changed["after"]["memory_repair"]["remap_pending"] is False  # type: ignore[index]


def test_the_full_state_before_the_reset_is_kept_even_when_the_step_fails() -> None:
    """Review #4: nvidia-smi -r clears the volatile ECC counters; the record kept only 7 fields."""
    before = changed_tag(changed_tag(xml(pending=True), "sram_correctable", "7"), "dram_correctable", "12")
    changed, ctx = reset(gpu_system(before=before))
    kept = changed["before"]
    assert kept["ecc"]["volatile_corrected"] == 19  # type: ignore[index]
    assert kept["memory_repair"]["bank_histogram"] == {"max": 192, "high": 0, "partial": 0, "low": 0, "none": 0}  # type: ignore[index]
    assert (kept["temperature_c"], kept["vbios"]) == (17.0, "94.02.75.00.01")  # type: ignore[index]
    # a failing step returns no `changed`: the command log carries the same record
    system = gpu_system(before=before, after_pending=True)
    ctx = ActionContext(system, timeout_s=60)
    spec = ACTIONS["reset_gpu"]
    with pytest.raises(ActionFailed):
        LinuxDriver(system).run(spec, spec.parse({"gpu": 0, "drained": True}), ctx)
    notes = [r.output for r in ctx.log.records if r.argv == ["state before the reset"]]
    assert len(notes) == 1
    assert '"volatile_corrected":19' in notes[0]
    assert '"bank_histogram"' in notes[0]


def test_after_the_reset_index_0_must_still_be_the_gpu_that_was_reset() -> None:
    """Review #3: the after-state was read by index and never checked to be the same GPU."""
    other = "GPU-00000000-1111-2222-3333-444444444444"
    after = xml(pending=False).replace(UUID, other).replace("00000000:00:1E.0", "00000000:00:1F.0")
    listed = LISTED + f"GPU 1: NVIDIA A10G (UUID: {other})\n"
    with pytest.raises(ActionFailed, match=r"after the reset 00000000:00:1F\.0"):
        reset(gpu_system(after=after, listed=listed), bdf="00000000:00:1E.0", uuid=UUID)
    # the centre gave neither BDF nor UUID: the GPU queried before the reset is the reference
    with pytest.raises(ActionFailed, match=r"not the GPU reset"):
        reset(gpu_system(after=after, listed=listed))


def test_a_gpu_without_a_uuid_must_still_be_listed_by_index() -> None:
    """Review #3: with the UUID N/A, the nvidia-smi -L check was skipped."""
    no_uuid = changed_tag(xml(pending=True), "uuid", "N/A")
    after = changed_tag(xml(pending=False), "uuid", "N/A")
    with pytest.raises(ActionFailed, match=r"GPU 0 \(00000000:00:1E.0\) is not listed by nvidia-smi -L"):
        reset(gpu_system(before=no_uuid, after=after, listed="No devices were found\n"))
    changed, _ = reset(gpu_system(before=no_uuid, after=after, listed="GPU 0: NVIDIA A10G (UUID: N/A)\n"))
    assert changed["after"]["memory_repair"]["remap_pending"] is False  # type: ignore[index]


def reset_status(text: str, *, required: str = "No", drain: str = "No") -> str:
    """The v12 gpu_reset_status block (the A10G's v11 document has none), after the UUID as the A100 sample has it."""
    block = (
        f"<gpu_reset_status><reset_required>{required}</reset_required>"
        f"<drain_and_reset_recommended>{drain}</drain_and_reset_recommended></gpu_reset_status>"
    )
    return text.replace("</uuid>", "</uuid>\n        " + block, 1)


@pytest.mark.parametrize(
    ("after", "reason"),
    [
        (reset_status(xml(pending=False), required="Yes"), "still asks for a reset"),
        (reset_status(xml(pending=False), drain="Yes"), "still asks for a reset"),
        (changed_tag(xml(pending=False), "remapped_row_failure", "Yes"), "row remapping failure"),
    ],
)
def test_a_gpu_that_still_asks_for_a_reset_or_failed_its_remap_fails_the_step(after: str, reason: str) -> None:
    """Review #3: reset_required / drain_and_reset_recommended were parsed and ignored; a remapping failure was
    only a note on a succeeded step."""
    with pytest.raises(ActionFailed, match=reason):
        reset(gpu_system(after=after))


def test_not_drained_nothing_runs() -> None:
    system = gpu_system()
    with pytest.raises(ActionFailed, match="refused: host not drained"):
        reset(system, drained=False)
    assert system.ran == []


def test_an_index_that_now_names_another_gpu_is_refused_before_the_reset() -> None:
    system = gpu_system()
    with pytest.raises(ActionFailed, match=r"GPU index 0 is now 00000000:00:1E.0, not 0000:4e:00.0"):
        reset(system, bdf="0000:4e:00.0")
    assert ["nvidia-smi", "-r", "-i", "0"] not in system.ran


def test_a_remap_still_pending_after_the_reset_fails_the_step() -> None:
    with pytest.raises(ActionFailed, match="still shows a row remap or page retirement pending"):
        reset(gpu_system(after_pending=True))


def test_a_gpu_that_does_not_come_back_fails_the_step() -> None:
    with pytest.raises(ActionFailed, match=r"is not listed by nvidia-smi -L after the reset"):
        reset(gpu_system(listed="No devices were found\n"))


def test_a_dry_run_resets_nothing() -> None:
    system = gpu_system()
    _, ctx = reset(system, dry_run=True)
    assert system.ran == [list(QUERY)]  # the read runs; the reset is only logged
    assert [r.kind for r in ctx.log.records][-1] == "dry_run"


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"gpu": -1}, "greater than or equal to 0"),
        ({"gpu": 64}, "less than or equal to 63"),
        ({"gpu": "0"}, "valid integer"),
        ({"gpu": 0, "bdf": "-r"}, "bdf: String should match"),
        ({"gpu": 0, "uuid": "GPU-x"}, "uuid: String should match"),
        ({}, "gpu: Field required"),
    ],
)
def test_parameters_refused(params: dict[str, object], reason: str) -> None:
    with pytest.raises(ActionRefused, match=reason):
        ACTIONS["reset_gpu"].parse(params)


def test_the_centre_fills_in_the_gpu_from_its_signal_and_the_drain_it_confirmed() -> None:
    signal = {
        "kind": "gpu_remap_pending",
        "subject": "gpu3 00000000:4E:00.0",
        "detail": {"index": 3, "bdf": "00000000:4E:00.0", "uuid": UUID, "serial": "1650"},
    }
    spec = ACTIONS["reset_gpu"]
    resolved = resolve_params(spec, {}, {"signal": signal, **DRAINED})
    assert resolved == {"gpu": 3, "bdf": "00000000:4E:00.0", "uuid": UUID, "drained": True}
    assert resolve_params(spec, {}, {"signal": signal})["drained"] is False  # no drain record: not drained
    # a plan's own `drained: true` is never believed
    assert resolve_params(spec, {"drained": True}, {"signal": signal})["drained"] is False
    with pytest.raises(ActionRefused, match="does not name a GPU index"):
        resolve_params(spec, {}, {"signal": {"kind": "dimm_ue", "detail": {"index": 3}}})


def test_the_contract_calls_it_disruptive_and_idempotent_and_the_agent_allows_it() -> None:
    assert ACTIONS["reset_gpu"].idempotent is CONTRACT["reset_gpu"].idempotent is True
    assert CONTRACT["reset_gpu"].disruptive is True  # counts against the blast-radius caps; runs drained
    assert "reset_gpu" in HOST_ACTIONS


def test_the_simulated_gpu_host_applies_the_pending_remap() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    executor, driver, reports = sim_executor(signer, faults=("gpu_remap_pending",), hardware_class="gpu-a100-8x")
    [gpu] = [g for g in driver.host.gpus if g.remap_pending]
    refused = signer.sign(envelope("reset_gpu", {"gpu": gpu.index, "drained": False})).model_dump()
    assert executor.handle(refused)["outcome"] == "failed"
    assert gpu.remap_pending
    message = signer.sign(envelope("reset_gpu", {"gpu": gpu.index, "bdf": gpu.spec.bdf, "drained": True}))
    assert executor.handle(message.model_dump()) == {"outcome": "succeeded", "error": None}
    assert not gpu.remap_pending
    assert not driver.host.has("gpu_remap_pending")
    [*_, result] = reports.of("remediator.step_result")
    assert result["commands"][0]["argv"][:2] == ["simulated", "reset_gpu"]
