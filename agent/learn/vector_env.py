"""Several scheduling environments stepped side by side, in worker processes.

Stepping the simulator is pure Python and numpy, so one process uses one core; the actor-critic
trainer's rollouts step `num_envs` environments split over `workers` processes (forked, so they
share the code already imported) and get back stacked observations. Each step also returns, per
environment, the observation an episode was cut off in (for bootstrapping) and, when kickstarting,
the teacher's choice for the next observation. With workers=0 everything runs in this process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass

import numpy as np

from agent.learn.teachers import teacher_for, teacher_targets
from agent.parallel import die_with_parent


@dataclass
class Step:
    nodes: np.ndarray  # [num_envs, slots, features] next observation (after a reset where one ended)
    pod: np.ndarray
    mask: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    cut_off: dict[int, dict[str, np.ndarray]]  # env index -> observation where a truncated episode stopped
    targets: np.ndarray | None  # teacher distributions for the next observation


class _Shard:
    """The environments of one worker."""

    def __init__(self, make_env, seeds: list[int], teachers: dict | None):
        self.envs = [make_env() for _ in seeds]
        self.teachers = teachers
        self.rng = np.random.default_rng(seeds[0])
        self.obs = [env.reset(seed=seed)[0] for env, seed in zip(self.envs, seeds)]

    def _targets(self) -> list[np.ndarray] | None:
        if not self.teachers:
            return None
        return [teacher_targets(teacher_for(self.teachers, env.sim.world.family, env.sim.world.size), env._state,
                                env._pod, env.max_nodes, self.rng)
                for env in self.envs]

    def current(self):
        return self.obs, self._targets()

    def step(self, actions):
        out = []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            obs, reward, terminated, truncated, _ = env.step(int(action))
            cut = obs if truncated and not terminated else None
            if terminated or truncated:
                obs, _ = env.reset()
            self.obs[i] = obs
            out.append((reward, terminated, truncated, cut))
        return out, self.obs, self._targets()


def _worker(conn, make_env, seeds, teachers, parent_pid) -> None:
    die_with_parent(parent_pid)
    shard = _Shard(make_env, seeds, teachers)
    while True:
        command, payload = conn.recv()
        if command == "current":
            conn.send(shard.current())
        elif command == "step":
            conn.send(shard.step(payload))
        else:
            conn.close()
            return


class EnvWorkers:
    def __init__(self, make_env, num_envs: int, seed: int, workers: int = 2, teachers: dict | None = None):
        seeds = [seed + i for i in range(num_envs)]
        self.num_envs = num_envs
        self.workers = max(0, min(workers, num_envs))
        if self.workers == 0:
            self.shards = [_Shard(make_env, seeds, teachers)]
            self.conns, self.procs = [], []
        else:
            parts = np.array_split(np.arange(num_envs), self.workers)
            ctx = mp.get_context("fork")
            self.conns, self.procs = [], []
            for part in parts:
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, daemon=True,
                                   args=(child, make_env, [seeds[i] for i in part], teachers, os.getpid()))
                proc.start()
                self.conns.append(parent)
                self.procs.append(proc)
        self.sizes = [len(p) for p in np.array_split(np.arange(num_envs), max(self.workers, 1))]

    def _gather(self, command: str, payloads: list) -> list:
        if self.workers == 0:
            shard = self.shards[0]
            return [shard.current() if command == "current" else shard.step(payloads[0])]
        for conn, payload in zip(self.conns, payloads):
            conn.send((command, payload))
        return [conn.recv() for conn in self.conns]

    @staticmethod
    def _stack(observations: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.stack([o["nodes"] for o in observations]), np.stack([o["pod"] for o in observations]),
                np.stack([o["action_mask"] for o in observations]).astype(bool))

    def current(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        results = self._gather("current", [None] * max(self.workers, 1))
        observations = [o for obs, _ in results for o in obs]
        targets = [t for _, ts in results if ts is not None for t in ts]
        return (*self._stack(observations), np.stack(targets) if targets else None)

    def step(self, actions: np.ndarray) -> Step:
        chunks, start = [], 0
        for size in self.sizes:
            chunks.append(actions[start:start + size].tolist())
            start += size
        results = self._gather("step", chunks)
        outcomes = [o for out, _, _ in results for o in out]
        observations = [o for _, obs, _ in results for o in obs]
        targets = [t for _, _, ts in results if ts is not None for t in ts]
        nodes, pod, mask = self._stack(observations)
        return Step(nodes, pod, mask,
                    rewards=np.array([o[0] for o in outcomes], dtype=np.float64),
                    terminated=np.array([o[1] for o in outcomes]), truncated=np.array([o[2] for o in outcomes]),
                    cut_off={i: o[3] for i, o in enumerate(outcomes) if o[3] is not None},
                    targets=np.stack(targets) if targets else None)

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
