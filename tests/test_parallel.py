"""Forked workers end with a parent killed by SIGKILL (a timed-out test, the OOM killer), and a pool
whose job fails or whose worker dies ends the run with that error instead of hanging: real
processes, real signals."""

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
    for _ in range(4):
        pool.submit(time.sleep, 600)
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


FAILING_JOBS = """
import sys
from agent.parallel import worker_pool

def job(k):
    if k == 3:
        raise ValueError("job 3 is bad")
    return b"x" * 200_000  # larger than a pipe's buffer: workers are mid-write when the error comes

for attempt in range(40):
    try:
        with worker_pool(2) as pool:
            list(pool.map(job, range(300)))
    except ValueError as error:
        assert "job 3 is bad" in str(error)
    else:
        sys.exit("no error")
print("ended", flush=True)
"""

DYING_WORKER = """
import os, signal
from concurrent.futures.process import BrokenProcessPool
from agent.parallel import worker_pool

def job(k):
    if k == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return k

try:
    with worker_pool(2) as pool:
        list(pool.map(job, range(50)))
except BrokenProcessPool:
    print("broken", flush=True)
"""


@pytest.mark.parametrize(("script", "expected"), [(FAILING_JOBS, "ended"), (DYING_WORKER, "broken")],
                         ids=["a-job-raises", "a-worker-is-killed"])
def test_a_pool_ends_with_the_error_instead_of_hanging(script, expected):
    """multiprocessing.Pool waits forever for a worker killed mid-job, and its terminate can hang on a
    result-queue lock held by a worker it killed mid-write (a test of rlscore-avoidable once hung there
    for 15 minutes)."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == expected
