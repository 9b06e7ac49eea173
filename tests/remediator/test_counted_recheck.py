"""The second review of repair-reopen, note 7 (probe /tmp/r6-recheck/test_episode.py): a throttle episode
that began before the repair and lasted long after it. Before: an interval whose throttled time was longer
than the time from the resolve to its end counted nothing, so a fix that did not help was held."""

from __future__ import annotations

from tests.remediator.test_counted_review import MINUTE, SECOND, T0, outcome, throttled

BEFORE = [(T0 - 11 * MINUTE, 4, 0)] + [(T0 - (10 - i) * MINUTE, 5, 0) for i in range(10)]  # throttled from 11:49


def test_note7_an_episode_lasting_8_minutes_past_the_resolve_reopens() -> None:
    """Resolved at 12:00:05; the package stays throttled until 12:08 (the episode open: count and time still),
    and the report at 12:09 shows its 20 minutes at once: the window (since 11:59) still holds the resolve,
    and at least 12:08 - 12:00:05 less the 2-minute cool-down, about 59% of it, came after the fix."""
    still = [(T0 + i * MINUTE, 5, 0) for i in range(1, 9)]
    percent = throttled([*BEFORE, *still, (T0 + 9 * MINUTE, 5, 20 * 60_000)])
    assert percent.detail["since"] < (T0 + 5 * SECOND).isoformat()  # recounted, not judged on its own
    assert outcome("cpu-package-throttling", percent, T0 + 5 * SECOND) == "reopen"


def test_note7_an_episode_ending_within_the_cool_down_after_the_resolve_is_held() -> None:
    """The negative case: the episode ends at 12:01:30, within the cool-down grace of the resolve at
    12:00:05 (the fix ended it), and the report at 12:02 shows its 12 minutes at once."""
    still = [(T0 + MINUTE, 5, 0)]
    percent = throttled([*BEFORE, *still, (T0 + 2 * MINUTE, 5, 12 * 60_000)])
    assert outcome("cpu-package-throttling", percent, T0 + 5 * SECOND) == "held"
