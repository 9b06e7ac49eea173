"""Shared test helpers: where the real tool samples are, and readers for their container formats.

They are defined in bench/samples.py, which the benches use too; a missing sample is a failure
(MissingSample, an AssertionError), never a skip.
"""

from __future__ import annotations

from bench.samples import (
    OURS,
    SAMPLES_ENV,
    MissingSample,
    listing_to_files,
    ours,
    read_ttar,
    sample,
    sample_names,
    samples_dir,
)

__all__ = [
    "OURS",
    "SAMPLES_ENV",
    "MissingSample",
    "listing_to_files",
    "ours",
    "read_ttar",
    "sample",
    "sample_names",
    "samples_dir",
]
