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


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """CPUs this process may run on: its affinity, within the container's quota (at least 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root)
    return max(1, min(cpus, math.floor(limit)) if limit is not None else cpus)


def busy_cpu_seconds(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU time every process on the machine has spent busy so far (None where /proc/stat is missing)."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        ticks = [int(x) for x in fields[1:]]
    except (OSError, ValueError, IndexError):
        return None
    if fields[0] != "cpu" or len(ticks) < 5:
        return None
    idle = ticks[3] + ticks[4]  # idle and iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already in user


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def threads_for(wanted: int, cpus: int, others: float) -> int:
    """Threads to use: `wanted`, fewer when other processes kept `others` cores busy, never less than
    one. A core less than half taken counts as free."""
    free = math.floor(cpus - max(0.0, others) + 0.5)
    return max(1, min(wanted, free))


class ThreadBudget:
    """Keeps torch's thread count at what the machine gives now: `check()` in a training loop measures
    the cores other processes kept busy since the last check (the machine's busy time less this
    process's own) and sets the threads for the next stretch."""

    def __init__(self, wanted: int, cpus: int | None = None, every_s: float = CHECK_EVERY_S):
        self.wanted, self.cpus, self.every_s = max(1, wanted), cpus or usable_cpus(), every_s
        self.threads = min(self.wanted, self.cpus)  # a container's quota from the start
        self.lowered = 0
        """how often other work took the threads down"""
        self.others = 0.0
        """cores other processes kept busy over the last stretch measured"""
        torch.set_num_threads(self.threads)
        self._last = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float | None, float]:
        return time.monotonic(), busy_cpu_seconds(), own_cpu_seconds()

    def check(self) -> int:
        if time.monotonic() - self._last[0] < self.every_s:
            return self.threads
        now = self._sample()
        wall = now[0] - self._last[0]
        if now[1] is not None and self._last[1] is not None:
            self.others = ((now[1] - self._last[1]) - (now[2] - self._last[2])) / wall
            threads = threads_for(self.wanted, self.cpus, self.others)
            if threads < self.threads:
                self.lowered += 1
            if threads != self.threads:
                torch.set_num_threads(threads)
                self.threads = threads
        self._last = now
        return self.threads
