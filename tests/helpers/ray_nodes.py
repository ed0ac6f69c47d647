"""A real Ray cluster on this machine: `ray start --block` head and worker nodes as separate processes
on loopback, run from .venv-ray (`make ray-venv`). The Ray tests and bench/ray_bench.py start theirs
with it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.helpers.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
RAY_PY = ROOT / ".venv-ray" / "bin" / "python"
RAY_CLI = ROOT / ".venv-ray" / "bin" / "ray"
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT),
       # a node that stops answering is declared dead within seconds (Ray's default is ~30 s)
       "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
       "RAY_health_check_initial_delay_ms": "1000",
       # a driver whose head went away gives up after 10 s (default 60 s)
       "RAY_gcs_rpc_server_reconnect_timeout_s": "10"}


class RayNodes:
    """`ray start --block` processes (each in its own session, so that a kill takes its raylet and
    workers with it)."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.tmp = tmp
        self.nodes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, head: bool = False, cpus: int = 1) -> None:
        """Start a node and wait until it has joined: nodes that register with a head at the same time
        on one host do not all join."""
        args = [str(RAY_CLI), "start", "--block", f"--num-cpus={cpus}", "--object-store-memory=100000000",
                "--disable-usage-stats"]
        args += (["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.tmp}"] if head
                 else [f"--address={self.address}"])
        self.nodes[name] = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
        wait_for(lambda: self.alive() >= len(self.nodes), 90, f"Ray node {name}", interval_s=1.0)

    def alive(self) -> int:
        out = subprocess.run([str(RAY_PY), "-c", (
            "import ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
            "print('alive', sum(n['Alive'] for n in ray.nodes()))") % self.address],
            env=ENV, capture_output=True, text=True, timeout=60)
        # Ray may print its own warnings on stdout after ours ("raylet has lagging heartbeats ...")
        counts = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("alive ")]
        return int(counts[-1]) if out.returncode == 0 and counts else 0

    def kill(self, name: str) -> None:
        os.killpg(self.nodes.pop(name).pid, signal.SIGKILL)

    def stop(self) -> None:
        for name in list(self.nodes):
            try:
                os.killpg(self.nodes[name].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.nodes.pop(name).wait(timeout=30)
