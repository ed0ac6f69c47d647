"""When each pod of a run appeared and went, as the scheduler saw it: a pod watch beside the run.

Prometheus records a pod's creation to the whole second and its end to a scrape, while on the
local cluster a pod arrives or goes every second or two; which of an arrival and a departure came
first decides whether the arrival finds room. The watch's ADDED and DELETED events are the moments
the scheduler's own informer learns of them, to the millisecond: a replay with these times tells
the simulator's fidelity apart from the record's resolution.
"""

from __future__ import annotations

import sys
import threading
import time

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


class PodTimeline:
    """Watches the pods matching `label_selector` in `namespace` from `start()` to `stop()`;
    `times` maps each pod's name to (first seen, deleted or None)."""

    def __init__(self, core: client.CoreV1Api, namespace: str, label_selector: str):
        self.core, self.namespace, self.label_selector = core, namespace, label_selector
        self.times: dict[str, tuple[float, float | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-timeline", daemon=True)
        self._ready = threading.Event()

    def start(self) -> PodTimeline:
        """Starts watching; returns once the watch has listed the pods there now."""
        self._thread.start()
        if not self._ready.wait(30.0):
            print("pod timeline: the watch did not start within 30 s; pod times stay unknown", file=sys.stderr)
        return self

    def stop(self) -> dict[str, tuple[float, float | None]]:
        self._stop.set()
        self._thread.join(timeout=10.0)
        return dict(self.times)

    def _run(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:  # (re)list: pods created while the watch was down count from now
                    listed = self.core.list_namespaced_pod(self.namespace, label_selector=self.label_selector)
                    now = time.time()
                    for pod in listed.items:
                        self.times.setdefault(pod.metadata.name, (now, None))
                    version = listed.metadata.resource_version
                    self._ready.set()
                stream = watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                              label_selector=self.label_selector, resource_version=version,
                                              timeout_seconds=5)
                for event in stream:
                    now, pod = time.time(), event["object"]
                    version = pod.metadata.resource_version
                    name = pod.metadata.name
                    if event["type"] == "DELETED":
                        self.times[name] = (self.times.get(name, (now, None))[0], now)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self.times.setdefault(name, (now, None))
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status != 410:  # 410: the version expired, list again
                    print(f"pod timeline: watch failed ({exc.status}); listing again", file=sys.stderr)
                    time.sleep(1.0)
                version = None
            except Exception as exc:  # noqa: BLE001 - a broken connection: list again, never stop the run
                print(f"pod timeline: watch broke ({exc}); listing again", file=sys.stderr)
                version = None
                time.sleep(1.0)
