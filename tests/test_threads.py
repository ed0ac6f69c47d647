"""Training's torch threads: fewer while other work holds the cores, and the clone's weights the same
whatever the count (agent/learn/threads.py)."""

import os
import subprocess
import sys
import time

import pytest
import torch

from agent.learn.threads import (ThreadBudget, busy_cpu_seconds, cgroup_cpu_limit, own_cores, threads_for,
                                 usable_cpus)


@pytest.mark.parametrize("wanted, cores, others, limit, expected", [
    (2, 2, 0.0, None, 2),   # a quiet machine
    (2, 2, 0.3, None, 2),   # a little other work leaves both cores
    (2, 2, 1.0, None, 1),   # another training run or a busy loop holds one core
    (2, 2, 2.5, None, 1),   # never fewer than one
    (4, 8, 3.2, None, 4),   # enough cores left for all
    (8, 8, 3.2, None, 5),
    (1, 2, 0.0, None, 1),   # never more than asked
    (2, 2, -0.2, None, 2),  # measurement noise below zero
    (2, 64, 40.0, 1, 1),    # a pod on a busy node: its quota of one core
    (2, 64, 40.0, 2, 2),    # ... of two: the node's other load leaves enough cores
])
def test_threads_leave_the_cores_other_work_holds(wanted, cores, others, limit, expected):
    assert threads_for(wanted, cores, others, limit) == expected


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "150000 100000\n"}, 1.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),
    ({"cpu.max": "garbage\n"}, None),
    ({}, None),
])
def test_the_containers_cpu_limit_is_read_from_either_cgroup_version(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_limit(tmp_path) == expected


def test_a_cpu_limit_below_the_cores_caps_the_threads(tmp_path):
    cores = frozenset({0, 1, 2, 3})
    assert usable_cpus(tmp_path, cores) == 4  # no limit: every core
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(tmp_path, cores) == 1
    (tmp_path / "cpu.max").write_text("20000 100000\n")
    assert usable_cpus(tmp_path, cores) == 1  # a fifth of a core still runs one thread
    wanted = torch.get_num_threads()
    try:
        assert ThreadBudget(2, limit=usable_cpus(tmp_path, cores)).threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(wanted)


def test_the_busy_time_of_the_processs_own_cores_is_read_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  300 0 150 3000 90 0 0 0 0 0\n"
                    "cpu0 100 0 50 1000 30 0 0 0 0 0\n"
                    "cpu1 200 0 100 2000 60 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    tick = os.sysconf("SC_CLK_TCK")
    assert busy_cpu_seconds(stat=stat) == pytest.approx(450 / tick)
    assert busy_cpu_seconds(frozenset({1}), stat) == pytest.approx(300 / tick)
    assert busy_cpu_seconds(frozenset({0, 1}), stat) == pytest.approx(450 / tick)
    assert busy_cpu_seconds(frozenset({7}), stat) is None  # a core the file does not list
    for text in ("intr 1 2 3\n", "", "cpu 1 2 x 4 5\n", "cpu 1 2\n"):
        stat.write_text(text)
        assert busy_cpu_seconds(stat=stat) is None, text
    assert busy_cpu_seconds(stat=tmp_path / "missing") is None


@pytest.mark.skipif(busy_cpu_seconds() is None or len(own_cores()) < 2,
                    reason="needs Linux's /proc/stat and two cores")
@pytest.mark.serial
def test_a_busy_process_beside_training_takes_a_thread_and_gives_it_back():
    """A real busy loop in another process holds one of two cores: the budget measures it, drops to
    one thread, and takes the second back once the loop has ended. The test and the loop run on two
    cores of the machine, so it means the same on any number of them."""
    wanted, cores = torch.get_num_threads(), own_cores()
    two = frozenset(sorted(cores)[:2])
    os.sched_setaffinity(0, two)
    budget = ThreadBudget(2, cores=two, limit=2, every_s=0.0)
    try:
        time.sleep(1.0)
        budget.check()
        if budget.others > 0.5:
            pytest.skip(f"other processes keep {budget.others:.1f} cores busy: the test needs a quiet core")
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # inherits the two cores
        try:
            time.sleep(0.3)
            budget.check()  # starts the measured stretch with the loop running
            time.sleep(1.5)
            assert budget.check() == 1 and torch.get_num_threads() == 1
            assert budget.others > 0.5 and budget.lowered == 1
        finally:
            busy.kill()
            busy.wait()
        budget.check()
        time.sleep(1.5)
        assert budget.check() == 2 and torch.get_num_threads() == 2
    finally:
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(wanted)


