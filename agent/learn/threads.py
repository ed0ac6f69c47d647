"""How many torch threads a training process can use without waiting on other work.

torch's CPU threads meet at the end of every operation, and a thread that waits spins. When other
processes hold the cores, each operation waits for a thread the kernel has not scheduled. On the
2-core reference machine two cloning runs side by side, 2 threads each, made 1.4 steps/s each
against 54 alone; with 1 thread each they made 38 and 54 (docs/training.md, "Training beside other
work"). A training run therefore asks for its configured threads only while the machine has the
cores free, and checks again every few seconds. The thread count does not change the weights: a
clone trained with 1 thread equals one trained with 2 (tests/test_threads.py)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import torch

CHECK_EVERY_S = 5.0
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the container may use (cgroup v2 cpu.max or v1 cfs quota); None without a limit."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def own_cores() -> frozenset[int]:
    """The cores this process may run on (its affinity: a container's cpuset, taskset)."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def usable_cpus(root: Path = CGROUP_ROOT, cores: frozenset[int] | None = None) -> int:
    """Threads this process can run at once: its cores, within the container's quota (at least 1)."""
    count = len(cores if cores is not None else own_cores())
    limit = cgroup_cpu_limit(root)
    return max(1, min(count, math.floor(limit)) if limit is not None else count)


def busy_cpu_seconds(cores: frozenset[int] | None = None, stat: Path = Path("/proc/stat")) -> float | None:
    """CPU time spent busy so far on the given cores (all of them: None), by every process; None where
    /proc/stat is missing."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    busy = 0
    seen = False
    for line in lines:
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        name = fields[0][3:]
        if (name != "" if cores is None else not (name.isdigit() and int(name) in cores)):
            continue
        try:
            ticks = [int(x) for x in fields[1:9]]
        except ValueError:
            return None
        if len(ticks) < 5:
            return None
        busy += sum(ticks) - ticks[3] - ticks[4]  # less idle and iowait; guest time is already in user
        seen = True
    return busy / os.sysconf("SC_CLK_TCK") if seen else None


def threads_for(wanted: int, cores: int, others: float, limit: int | None = None) -> int:
    """Threads to use: `wanted`, within the `limit` (a quota), fewer when other processes kept `others`
    of our `cores` busy, never less than one. A core less than half taken counts as free."""
    free = math.floor(cores - max(0.0, others) + 0.5)
    return max(1, min(wanted, free, limit or cores))


class ThreadBudget:
    """Keeps torch's thread count at what the machine gives now: `check()` in a training loop measures
    how busy other processes kept this process's cores since the last check (their busy time in
    /proc/stat less this process's own) and sets the threads for the next stretch."""

    def __init__(self, wanted: int, cores: frozenset[int] | None = None, limit: int | None = None,
                 every_s: float = CHECK_EVERY_S):
        self.cores = cores if cores is not None else own_cores()
        self.limit = limit if limit is not None else usable_cpus(cores=self.cores)
        self.wanted, self.every_s = max(1, wanted), every_s
        self.threads = min(self.wanted, self.limit)  # a container's quota from the start
        self.lowered = 0
        """how often other work took the threads down"""
        self.others = 0.0
        """cores other processes kept busy over the last stretch measured"""
        torch.set_num_threads(self.threads)
        self._since, self._busy, self._own = time.monotonic(), busy_cpu_seconds(self.cores), time.process_time()

    def check(self) -> int:
        now = time.monotonic()
        if now - self._since < self.every_s:
            return self.threads
        busy, own = busy_cpu_seconds(self.cores), time.process_time()
        if busy is not None and self._busy is not None:
            self.others = ((busy - self._busy) - (own - self._own)) / (now - self._since)
            threads = threads_for(self.wanted, len(self.cores), self.others, self.limit)
            if threads < self.threads:
                self.lowered += 1
            if threads != self.threads:
                torch.set_num_threads(threads)
                self.threads = threads
        self._since, self._busy, self._own = now, busy, own
        return self.threads
