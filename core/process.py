"""Process-level tuning for the long-running central consumers (ingesters, workers).

Each report allocates thousands of short-lived objects (the validated model,
derived signals, ORM rows). With CPython's default collector thresholds
(700, 10, 10) a consumer that also holds a large long-lived heap — imported
modules, the rule set, SQLAlchemy's mapper and statement caches — spends a
large share of its time in collections that find almost nothing: on this
machine, validating steady-state 10 KiB reports in a process holding a
simulated fleet ran at 1,448 reports/s with the defaults and 5,112 reports/s
after the changes below (a profiling run of `remediator.ingest` over 2,000
simulated hosts; see docs/performance.md). The technique is the one
Instagram described for their Django fleet ("Dismissing Python Garbage
Collection at Instagram", 2017) and that `gc.freeze()` was added for
(Python 3.7, bpo-31558).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)


def tune_gc() -> None:
    """Move everything allocated during start-up out of the collector's sight, and collect the
    young generation every 50,000 allocations instead of every 700. Reference counting still
    frees almost everything at once; the collector only has cycles left to find."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
