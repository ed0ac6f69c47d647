"""The largest sum of cpu requests a cluster carried within a sliding window, for the
`recent_peak_to_come` feature: kept by the simulator per world and by the server from its watch.

Sums rise only when a pod is bound, so recording the sum after each bind (or each rise) is enough.
A deque of (time, sum) with the sums falling from left to right keeps the window's peak at its left
end: each record drops the entries it overshadows, each read drops the ones the window left behind,
so both cost O(1) amortized however many pods come and go.
"""

from __future__ import annotations

import collections
import math

from rlscore.core.features import RECENT_PEAK_WINDOW_S


class RecentPeak:
    def __init__(self, window_s: float = RECENT_PEAK_WINDOW_S):
        if not window_s > 0:
            raise ValueError(f"the recent-peak window must be > 0 s, not {window_s!r}")
        self.window_s = window_s
        self._entries: collections.deque[tuple[float, float]] = collections.deque()

    def record(self, when: float, total: float) -> None:
        """The cluster's sum of cpu requests at `when` (times never go back)."""
        if not math.isfinite(total):
            return
        entries = self._entries
        while entries and entries[-1][1] <= total:
            entries.pop()
        entries.append((when, total))

    def peak(self, now: float, current: float) -> float:
        """The largest sum recorded within the window before `now`, or `current` when larger."""
        entries, since = self._entries, now - self.window_s
        while entries and entries[0][0] < since:
            entries.popleft()
        return max(entries[0][1], current) if entries else current
