"""Forked workers end with a parent killed by SIGKILL (a timed-out test, the OOM killer): the
teacher picking's pool and the actor-critic's environment workers, in real processes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

POOL = """
import time
from agent.parallel import fork_pool
with fork_pool(2) as pool:
    pool.map_async(time.sleep, [600, 600, 600, 600], chunksize=1)
    time.sleep(1)
    print("ready", flush=True)
    time.sleep(600)
"""

PLAIN_POOL = """
import multiprocessing, time
with multiprocessing.get_context("fork").Pool(2) as pool:
    pool.map_async(time.sleep, [600, 600, 600, 600], chunksize=1)
    time.sleep(1)
    print("ready", flush=True)
    time.sleep(600)
"""


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill_parent_and_watch(script: str, wait_s: float = 10.0) -> tuple[set[int], set[int]]:
    """(the workers the script forked, those still running `wait_s` after it was SIGKILLed)."""
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        workers = _children(parent.pid)
        assert len(workers) == 2, workers
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        return workers, {w for w in workers if _alive(w)}
    finally:
        parent.kill()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("script", [POOL], ids=["pool"])
def test_workers_end_with_a_killed_parent(script):
    _, left = _kill_parent_and_watch(script)
    assert not left, f"workers {sorted(left)} outlived their parent"


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_plain_forked_pool_outlives_its_parent():
    """Why fork_pool exists: the same script on multiprocessing's own pool leaves its workers."""
    workers, left = _kill_parent_and_watch(PLAIN_POOL, wait_s=2.0)
    try:
        assert left == workers
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
