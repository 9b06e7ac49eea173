"""A GPU ticket's `dcgm_diag` evidence: what the site's last `dcgmi diag` run said of this GPU (the report's
gpu.diag, checker/parsers/dcgmi_diag.py). Evidence only: no rule reads it and no action follows from it.

A test counts for the GPU when it failed or warned for All GPUs or for this GPU's index (a GPU whose index is
not known: All GPUs' only); its warnings are those naming this GPU or none. The run's index of a GPU is found
by its board serial (the report's `run_serials`, the boards when the run was first read), not by its index
now: a renumbering (a GPU fallen off the bus, the driver reloaded) moves indices, and a board swapped in since
the run is at no index of it. Where the run's boards are not known (`run_serials` null: read late, no
serial, an older agent) or the GPU's serial is not, only All GPUs' results count (review r7, finding 4). A failure
that could not run (CUDA would not initialise: the fabric manager, the driver) is said to be a setup fault,
so a technician is not sent to swap a GPU whose memory test never started (the corpus's H100 sample)."""

from __future__ import annotations

from typing import Any

MAX_TESTS = 16
MAX_WARNINGS = 8
NOTE = (
    "the site's own dcgmi diag run (fleetfix runs none), read from the agent's state directory; a failure "
    "with could_not_run is a setup fault (CUDA did not initialise), not the GPU's"
)


def _for_gpu(test: dict[str, Any], index: Any) -> bool:
    """A test of All GPUs, or one naming this GPU's index; a GPU whose index is not known gets only the tests
    of All GPUs (review r4, finding 6: it was credited with every GPU's failures)."""
    gpus = test.get("gpus")
    return gpus is None or (index is not None and index in gpus)


def dcgm_diag_of(part: dict[str, Any] | None, observations: dict[str, Any]) -> dict[str, Any] | None:
    """The diag's findings for the GPU `part` names (its `index`), or None when the report carries no diag."""
    diag = (observations.get("gpu") or {}).get("diag")
    if not isinstance(diag, dict):
        return None
    index, serial = (part or {}).get("index"), (part or {}).get("serial")
    boards = diag.get("run_serials")
    run_index = None  # this board's index in the run, by its serial (module docstring)
    if isinstance(boards, dict) and serial:
        run_index = next((int(i) for i, board in boards.items() if board == serial), None)
    replaced = isinstance(boards, dict) and bool(serial) and run_index is None  # not among the run's boards
    tests = [t for t in diag.get("tests") or [] if isinstance(t, dict) and _for_gpu(t, run_index) and not replaced]
    failed = [
        {
            "name": t.get("name"),
            "group": t.get("group"),
            "kind": t.get("kind"),
            "result": t.get("result_text"),
            "could_not_run": bool(t.get("could_not_run")),
            "warnings": [
                w.get("text")
                for w in t.get("warnings") or []
                if isinstance(w, dict) and w.get("gpu") in (None, run_index)
            ][:MAX_WARNINGS],
        }
        for t in tests
        if t.get("result") in ("fail", "warn")
    ]
    return {
        "dcgm_version": diag.get("dcgm_version"),
        "driver_version": diag.get("driver_version"),
        "first_seen": diag.get("first_seen"),
        "written_at": diag.get("written_at"),
        "gpu_index": index,
        "run_index": run_index,
        "boards_known": isinstance(boards, dict),
        "replaced_since_run": replaced,
        "failed": failed[:MAX_TESTS],
        "passed": [t.get("name") for t in tests if t.get("result") == "pass"][: MAX_TESTS * 2],
        "skipped": [t.get("name") for t in tests if t.get("result") == "skip"][:MAX_TESTS],
        "note": NOTE,
    }
