"""Every known node's state as columns, one row per node: the server's per-node cache.

The Kubernetes watch writes sizes, power annotations and pod requests as events arrive; the metrics
refresh writes utilization, latency, power from Kepler and the extra metrics for all rows at once.
A request only maps its node names to rows and reads them in one compiled pass over the block
(snapshot.assemble), so its cost is a dictionary lookup per node, never per-field Python loops or I/O.

Rows are created only for names the API or Prometheus report, so requests cannot grow the table; a
name without a row reads as all-unknown (the spare last row, which stays NaN). The table forgets a row
that the API does not have, that holds no pods and that no metric named within `forget_after_s`, and
never holds more than `max_nodes` rows: a Prometheus that reports names the cluster does not have
cannot grow it without bound.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import repeat

import numpy as np

from rlscore.core.recent_peak import RecentPeak

# Columns the Kubernetes API owns: node objects (`in_api` is 1 while the API has the node) ...
NODE_COLUMNS = ("in_api", "cpu_capacity", "memory_capacity", "max_pods", "power_idle_watts", "power_max_watts")
# ... and the requests of the pods bound to each node (0 for a new row, whatever reports it first)
USAGE_COLUMNS = ("cpu_requested", "memory_requested", "pods")
# ... and those the metrics refresh owns. `*_metrics` are node_exporter's sizes and Kepler's power
# model, used where the API has none; `requested_at` is cpu_requested when the metrics were read;
# `requested_showing` the part of it whose use the metrics could show then (see NodeTable).
METRIC_COLUMNS = ("cpu_utilization", "memory_utilization", "latency_ms", "network_receive_bytes_per_s",
                  "tcp_established", "disk_utilization", "cpu_utilization_stddev", "cpu_capacity_metrics",
                  "memory_capacity_metrics", "power_idle_metrics", "power_max_metrics", "requested_at",
                  "requested_showing")
COLUMNS = NODE_COLUMNS + USAGE_COLUMNS + METRIC_COLUMNS

# Every source's node quantities are bounded by what Kubernetes can report, so that sums and products
# of them stay far inside a float's range: a quantity is an int64 of its smallest unit (millicores,
# bytes, pods); power in watts and a probe's latency in ms get bounds far past any machine's.
MAX_QUANTITY = float(2**63)
MAX_COUNT = 2**63
MAX_WATTS = 1e9
MAX_LATENCY_MS = 1e9
BIND_LOG_MAX = 1_000_000  # binds and departures kept for `requested_showing` (a few per pod and window)


class NodeTable:
    """`usage_onset_s` and `usage_linger_s` say how the cpu metric lags the pods: a pod's use shows
    from that long after its binding, and a gone pod's until that long after it left (a rate needs
    two scrapes; calibration measures both, as a profile's usageOnsetSeconds and usageLingerSeconds).
    With them `requested_showing` counts only the requests whose use the metrics could show, so a
    burst of new pods does not read as pods using less than they request."""

    def __init__(self, capacity: int = 256, usage_onset_s: float = 0.0, usage_linger_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, forget_after_s: float = 600.0,
                 max_nodes: int = 50_000):
        if not (usage_onset_s >= 0 and usage_linger_s >= 0):
            raise ValueError(f"usage onset and linger must be >= 0 s, got {usage_onset_s} and {usage_linger_s}")
        self.usage_onset_s, self.usage_linger_s, self.now = usage_onset_s, usage_linger_s, clock
        self.forget_after_s, self.max_nodes = forget_after_s, max_nodes
        self.refused = 0  # names not given a row because the table was full
        # (when, row, cpu, bound at, gone): binds (when = bound at) and departures within the lags
        self._binds: deque[tuple[float, int, float, float, bool]] = deque(maxlen=BIND_LOG_MAX)
        self._lock = threading.Lock()
        self.index: dict[str, int] = {}
        self.names: list[str] = []
        # the sum of every node's cpu requests and its recent peak (self.now()); unknown
        # until the watch reported pods once
        self._cpu_total = math.nan
        self._request_peak = RecentPeak()
        self._alloc(max(capacity, 1))

    def _alloc(self, capacity: int) -> None:
        old, old_seen = getattr(self, "data", None), getattr(self, "seen_at", None)
        # one block, a row per column (+1 node: the unknown row), so a request reads it in one pass
        self.data = np.full((len(COLUMNS), capacity + 1), np.nan)
        self.seen_at = np.zeros(capacity + 1)  # when a metric or the API last named the node
        if old is not None:
            self.data[:, : len(self.names)] = old[:, : len(self.names)]
            self.seen_at[: len(self.names)] = old_seen[: len(self.names)]
        self.columns = {name: self.data[i] for i, name in enumerate(COLUMNS)}  # views

    @property
    def unknown_row(self) -> int:
        return self.data.shape[1] - 1

    def _row(self, name: str, create: bool = True) -> int | None:
        """The row of `name`, created when missing (unless not `create`, or the table is full: None);
        call with the lock held."""
        row = self.index.get(name)
        if row is None:
            if not create:
                return None
            if len(self.names) >= self.max_nodes:
                self.refused += 1
                return None
            if len(self.names) >= self.unknown_row:
                self._alloc(2 * self.unknown_row)
            row = len(self.names)
            self.index[name] = row
            self.names.append(name)
            for key in USAGE_COLUMNS:
                self.columns[key][row] = 0.0
            self.seen_at[row] = self.now()
        return row

    def __len__(self) -> int:
        return len(self.names)

    # --- writers ---------------------------------------------------------------------------------

    def set_node(self, name: str, **values: float | None) -> None:
        """A node object's sizes and power annotations (None: unknown)."""
        with self._lock:
            row = self._row(name)
            if row is None:
                return
            cols = self.columns
            cols["in_api"][row] = 1.0
            self.seen_at[row] = self.now()
            for key, value in values.items():
                cols[key][row] = np.nan if value is None else value

    def remove_node(self, name: str) -> None:
        """The API no longer has the node: what its object said becomes unknown."""
        with self._lock:
            row = self.index.get(name)
            if row is not None:
                for key in NODE_COLUMNS:
                    self.columns[key][row] = np.nan

    def add_usage(self, name: str, cpu: float, memory: float, pods: float, bound_at: float | None = None) -> None:
        """Requests of a pod bound to (or gone from, negative) the node. `bound_at` (self.now()'s
        time the pod was bound; for a departure, the one its bind gave) marks a bind or a departure
        the metrics lag behind; without it the change counts as showing at once (a resize)."""
        with self._lock:
            row = self._row(name)
            if row is None:
                return
            cols = self.columns
            cols["cpu_requested"][row] += cpu
            cols["memory_requested"][row] += memory
            cols["pods"][row] += pods
            self._cpu_total = (0.0 if math.isnan(self._cpu_total) else self._cpu_total) + cpu
            now = self.now()
            self._request_peak.record(now, self._cpu_total)
            if bound_at is not None and pods != 0 and (self.usage_onset_s > 0 or self.usage_linger_s > 0):
                self._forget_settled(now)  # here too: without metrics no refresh would ever prune
                self._binds.append((now, row, abs(cpu), bound_at, pods < 0))

    def replace_nodes(self, nodes: dict[str, dict[str, float | None]]) -> None:
        """After a relist of nodes: the API's nodes as they are now."""
        with self._lock:
            for key in NODE_COLUMNS:
                self.columns[key][: self.unknown_row] = np.nan
        for name, values in nodes.items():
            self.set_node(name, **values)

    def replace_usage(self, usage: dict[str, tuple[float, float, float]]) -> None:
        """After a relist of pods: every node's requests as they are now."""
        with self._lock:
            rows = {name: self._row(name) for name in usage}  # first: a new row may grow the columns
            cols = self.columns
            for key in USAGE_COLUMNS:
                cols[key][: self.unknown_row] = 0.0
            for name, (cpu, memory, pods) in usage.items():
                row = rows[name]
                if row is not None:
                    cols["cpu_requested"][row], cols["memory_requested"][row], cols["pods"][row] = cpu, memory, pods
            self._cpu_total = float(cols["cpu_requested"][: len(self.names)].sum())
            self._request_peak.record(self.now(), self._cpu_total)
            self._binds.clear()  # a relist's pods count as showing

    def replace_metrics(self, metrics: dict[str, dict[str, float]], new_rows: bool = True) -> None:
        """A refresh's metrics for every node; nodes it does not mention become unknown. Records
        the current requests as `requested_at`. With `new_rows` False (the Kubernetes API is the
        authority on which nodes exist) metrics of names without a row are dropped. Then forgets
        what is stale."""
        with self._lock:
            now = self.now()
            rows = {name: self._row(name, new_rows) for name in metrics}  # first: a new row may grow the columns
            cols = self.columns
            for key in METRIC_COLUMNS:
                cols[key][: self.unknown_row] = np.nan
            for name, values in metrics.items():
                row = rows[name]
                if row is None:
                    continue
                self.seen_at[row] = now
                for key, value in values.items():
                    cols[key][row] = value
            self._forget(now)
            cols = self.columns
            cols["requested_at"][: self.unknown_row] = cols["cpu_requested"][: self.unknown_row]
            cols["requested_showing"][: self.unknown_row] = self._requested_showing()

    def _forget(self, now: float) -> None:
        """Drop the rows the API does not have, that hold no pods and that nothing named within
        `forget_after_s` (lock held): the table is rebuilt without them, and the bind log follows."""
        n = len(self.names)
        cols = self.columns
        held = ((cols["in_api"][:n] == 1.0) | (cols["pods"][:n] > 0)
                | (self.seen_at[:n] >= now - self.forget_after_s))
        if held.all():
            return
        keep = np.flatnonzero(held)
        new_row = np.full(n, -1)
        new_row[keep] = np.arange(keep.size)
        self.data[:, : keep.size] = self.data[:, keep]
        self.data[:, keep.size: n] = np.nan
        self.seen_at[: keep.size] = self.seen_at[keep]
        self.names = [self.names[i] for i in keep]
        self.index = {name: i for i, name in enumerate(self.names)}
        self._binds = deque(((when, int(new_row[row]), cpu, bound_at, gone) for when, row, cpu, bound_at, gone
                             in self._binds if new_row[row] >= 0), maxlen=BIND_LOG_MAX)

    def _requested_showing(self) -> np.ndarray:
        """Each row's cpu requests of the pods whose use the metrics can show now: bound at least
        the onset ago, and those gone less than the linger ago that had shown (lock held)."""
        showing = self.columns["cpu_requested"][: self.unknown_row].copy()
        now = self.now()
        self._forget_settled(now)
        onset_from, linger_from = now - self.usage_onset_s, now - self.usage_linger_s
        for when, row, cpu, bound_at, gone in self._binds:
            if bound_at > onset_from:  # bound, its use not in the metrics yet (gone: undoes its bind's -cpu)
                showing[row] += cpu if gone else -cpu
            elif gone and when > linger_from and bound_at + self.usage_onset_s <= when:
                showing[row] += cpu  # gone, its use still in the metrics
        return showing

    def _forget_settled(self, now: float) -> None:
        """Drop the binds and departures both lags have passed (lock held)."""
        settled = now - max(self.usage_onset_s, self.usage_linger_s)
        while self._binds and self._binds[0][0] <= settled:
            self._binds.popleft()

    # --- readers ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[np.ndarray]:
        """The block of columns under the lock: a row per COLUMNS entry, a column per node row."""
        with self._lock:
            yield self.data

    def rows(self, names: list[str]) -> np.ndarray:
        # map() keeps the per-name loop in C: at 5000 names this is most of a request's Python work
        return np.fromiter(map(self.index.get, names, repeat(self.unknown_row, len(names))), dtype=np.intp,
                           count=len(names))

    def cluster_cpu_requested(self) -> tuple[float, float]:
        """(every node's cpu requests now, their largest sum within the recent-peak window), NaN
        before the watch reported pods: NodeState's cluster_cpu_requested and recent peak."""
        with self._lock:
            if math.isnan(self._cpu_total):
                return math.nan, math.nan
            return self._cpu_total, self._request_peak.peak(self.now(), self._cpu_total)

    def snapshot(self, keys: tuple[str, ...]) -> tuple[list[str], dict[str, np.ndarray]]:
        """Every row's name and a copy of `keys`, in row order."""
        with self._lock:
            n = len(self.names)
            return list(self.names), {key: self.columns[key][:n].copy() for key in keys}

    def column(self, key: str) -> dict[str, float]:
        with self._lock:
            values = self.columns[key]
            return {name: float(values[row]) for name, row in self.index.items() if not np.isnan(values[row])}
