"""Process tuning of the central consumers."""

from __future__ import annotations

import subprocess
import sys


def test_tune_gc_freezes_the_startup_heap_and_raises_the_young_threshold() -> None:
    probe = (
        "import gc, json; from core.process import tune_gc, YOUNG_THRESHOLD; before = gc.get_threshold(); "
        "tune_gc(); print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count(), YOUNG_THRESHOLD]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    import json

    before, after, frozen, young = json.loads(done.stdout)
    assert before[0] < young
    assert after[0] == young
    assert frozen > 1000  # the modules imported at start-up are out of the collector's sight
