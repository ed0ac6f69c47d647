"""Worker processes that end with the process that forked them.

Forked workers outlive a parent killed with SIGKILL (a test's timeout, the OOM killer, `kill -9`):
a pool's workers go on simulating the jobs already queued, then wait on a queue nobody writes, and
an environment worker waits on its pipe for good, each holding a core or memory until someone
finds it. On Linux each worker asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG);
elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Called first in a forked worker: SIGTERM when `parent_pid` (the process that forked it) dies."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died between the fork and the request
        os._exit(1)


def fork_pool(workers: int) -> multiprocessing.pool.Pool:
    """A forked pool (the workers share the code already imported) whose workers end with this process."""
    return multiprocessing.get_context("fork").Pool(workers, initializer=die_with_parent, initargs=(os.getpid(),))
