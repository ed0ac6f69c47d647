"""Where heavy work runs: forked processes on this machine, or Ray tasks on a Ray cluster.

Every fan-out in agent/ (evaluation worlds, teacher picking, tuner trials, the gate) goes through
`worker_pool`, which yields an object with `map(fn, jobs)`: results in the order of `jobs`, each
computed by `fn(job)` from the job alone and the pool's `shared` value (read with `shared()`), so
the same seeds give the same results on one core, on a forked pool and on Ray.

Locally, workers are forked after `shared` is set, so they inherit it (models included) instead of
receiving it pickled; each asks the kernel to end it with its parent (PR_SET_PDEATHSIG): forked
workers otherwise outlive a parent killed with SIGKILL, each holding a core or memory until someone
finds it. The local pool is concurrent.futures' process pool, not multiprocessing.Pool: a worker
that dies (the OOM killer) fails the run with BrokenProcessPool where Pool waits forever, and a job
that raises ends the pool by cancelling the jobs not started, where Pool.terminate kills workers
that may hold the result queue's lock and can then hang on it.

With a Ray address (`use_ray`, from `--ray-address` or RLSCORE_RAY_ADDRESS), each job is a Ray task
on any node of the cluster; `shared` is put in Ray's object store once. A task whose worker dies is
retried (`RAY_TASK_RETRIES`); a run that loses its cluster raises ClusterLost, and the commands exit
non-zero before writing anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

RAY_ADDRESS_ENV = "RLSCORE_RAY_ADDRESS"
RAY_TASK_RETRIES = 3
"""times a task is re-run after the process or node running it died"""
_PR_SET_PDEATHSIG = 1

_SHARED: Any = None  # what the pool's jobs read with shared(): inherited by forked workers
_RAY_ADDRESS: str | None = None
_CARRIED: list[tuple[Callable[[], Any], Callable[[Any], None]]] = []


class ClusterLost(SystemExit):
    """The Ray cluster went away (or a task failed on every retry): the run's results are incomplete, so
    the command ends (exit status 1, the message on stderr) before anything is written; a SystemExit,
    so that no `except Exception` on the way records a partial result."""


def carry_to_workers(capture: Callable[[], Any], restore: Callable[[Any], None]) -> None:
    """Module state that jobs need besides `shared` (the cluster profiles registered as scenario
    families): forked workers inherit it; a Ray worker, a fresh process, is handed `capture()` as
    taken when the pool opened and calls `restore` on it before each job. `restore` must be a
    module-level function (Ray pickles it by reference)."""
    _CARRIED.append((capture, restore))


def carried_state() -> list[tuple[Callable[[Any], None], Any]]:
    """The carried module state as it is now, for a Ray worker or actor (restore_carried)."""
    return [(restore, capture()) for capture, restore in _CARRIED]


def restore_carried(carried: list[tuple[Callable[[Any], None], Any]]) -> None:
    for restore, state in carried:
        restore(state)


def shared() -> Any:
    """The `shared` value of the pool running the current job."""
    return _SHARED


def use_ray(address: str | None) -> None:
    """Run every later worker_pool on the Ray cluster at `address` ("auto", "ray://host:10001", a
    head's host:port); None or "" runs them locally again."""
    global _RAY_ADDRESS
    _RAY_ADDRESS = address or None


def ray_address() -> str | None:
    return _RAY_ADDRESS


def add_ray_argument(parser) -> None:
    """--ray-address for a command (default: RLSCORE_RAY_ADDRESS, else local processes)."""
    parser.add_argument("--ray-address", default=os.environ.get(RAY_ADDRESS_ENV, ""), metavar="ADDRESS",
                        help="run the heavy work as tasks on this Ray cluster: auto (the cluster this machine "
                             "belongs to), ray://host:10001 or host:6379; needs rlscore[distributed] "
                             f"(default: ${RAY_ADDRESS_ENV}, else processes on this machine)")


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


def fork_pool(workers: int) -> ProcessPoolExecutor:
    """A forked pool (the workers share the code already imported) whose workers end with this process;
    they are forked at the first submit."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=die_with_parent, initargs=(os.getpid(),))


class _Serial:
    def map(self, fn: Callable[[Any], Any], jobs: Iterable) -> Iterator:
        return map(fn, jobs)


class _Forked:
    def __init__(self, pool: ProcessPoolExecutor):
        self.pool = pool

    def map(self, fn: Callable[[Any], Any], jobs: Iterable) -> Iterator:
        return self.pool.map(fn, jobs)


def _ray_job(fn: Callable[[Any], Any], job: Any, value: tuple[Any, list]) -> Any:
    """One job in a Ray worker: the pool's shared value (resolved from the object store) for shared(),
    and the driver's carried module state restored (carry_to_workers)."""
    global _SHARED
    _SHARED, carried = value
    restore_carried(carried)
    return fn(job)


class _OnRay:
    """Jobs as Ray tasks, a bounded number in flight, results in order."""

    def __init__(self, ray, value: Any):
        self.ray = ray
        self.value = ray.put((value, carried_state()))
        self.task = ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES)(_ray_job)
        self.window = max(4, 2 * int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[Any], Any], jobs: Iterable) -> Iterator:
        pending: deque = deque()
        for job in jobs:
            pending.append(self.task.remote(fn, job, self.value))
            if len(pending) >= self.window:
                yield self._get(pending.popleft())
        while pending:
            yield self._get(pending.popleft())

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as error:  # the job itself raised: its own error
            raise error.as_instanceof_cause() from None
        except self.ray.exceptions.RayError as error:
            raise ClusterLost(f"the Ray cluster at {_RAY_ADDRESS} lost a task after {RAY_TASK_RETRIES} retries "
                              f"or went away: {type(error).__name__}: {str(error)[:300]}") from None


def connect_ray(address: str):
    """Ray, connected to the cluster at `address` (once per process)."""
    try:
        import ray
    except ImportError:
        raise SystemExit(f"--ray-address {address}: Ray is not installed (pip install 'rlscore[distributed]')") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise SystemExit(f"--ray-address {address}: cannot connect to a Ray cluster there: {error}") from None
    return ray


@contextlib.contextmanager
def worker_pool(workers: int, shared: Any = None) -> Iterator[_Serial | _Forked | _OnRay]:
    """A pool whose map(fn, jobs) runs fn on each job on `workers` forked processes (1: here, in
    order), or as Ray tasks once use_ray has named a cluster; `shared` is what the jobs read with
    shared(). Fork only from a process without other threads at work (a CLI or a training run)."""
    global _SHARED
    previous, _SHARED = _SHARED, shared
    try:
        if _RAY_ADDRESS:
            yield _OnRay(connect_ray(_RAY_ADDRESS), shared)
        elif workers > 1:
            pool = fork_pool(workers)
            try:
                yield _Forked(pool)
            finally:  # after an error: the jobs not started are dropped, those running end first
                pool.shutdown(wait=True, cancel_futures=True)
        else:
            yield _Serial()
    finally:
        _SHARED = previous
