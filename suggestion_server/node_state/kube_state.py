"""An informer-style cache of nodes and the pods bound to them, fed by list + watch.

Scoring never calls the API: it reads this cache. Two daemon threads list once, then follow the
watch from the list's resourceVersion (re-watching from the last event's version when a watch times
out), and list again only when that version expired (410 Gone) or the connection broke.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, replace as replace_field

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.quantity import parse_quantity
from kubernetes.watch.watch import iter_resp_lines

from suggestion_server.node_state.node_table import MAX_QUANTITY, MAX_WATTS, NodeTable

log = logging.getLogger("rlscore.kube")

WATCH_TIMEOUT_S = 60
MAX_BACKOFF_S = 30.0
# A node's power model, declared by the operator as a label or an annotation (watts).
POWER_IDLE_KEY = "rlscore.io/power-idle-watts"
POWER_MAX_KEY = "rlscore.io/power-max-watts"


@dataclass(frozen=True)
class KubeNode:
    name: str
    internal_ip: str | None
    cpu_millicores: float | None
    memory_bytes: float | None
    max_pods: float | None
    power_idle_watts: float | None = None
    power_max_watts: float | None = None


@dataclass(frozen=True)
class KubePod:
    node: str
    cpu_millicores: float
    memory_bytes: float
    bound_at: float = -math.inf  # NodeTable.now() when the watch first saw it bound (-inf: a relist's)


def _quantity(resources: dict | None, key: str, scale: float = 1.0) -> float | None:
    if not resources or key not in resources:
        return None
    try:
        value = float(parse_quantity(resources[key])) * scale
    except (ValueError, TypeError):
        return None
    return value if 0 <= value <= MAX_QUANTITY else None  # beyond Kubernetes' int64: unknown


def _watts(meta: dict, key: str) -> float | None:
    """A power value from the node's annotations (preferred) or labels; None when absent."""
    raw = (meta.get("annotations") or {}).get(key, (meta.get("labels") or {}).get(key))
    if raw is None:
        return None
    try:
        value = float(str(raw).strip().removesuffix("W"))
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or not 0 <= value <= MAX_WATTS:
        raise ValueError(f"{key}={raw!r} is not a number of watts from 0 to {MAX_WATTS:g}")
    return value


_power_warnings: dict[str, str] = {}  # node -> last warning, so a bad annotation is logged once


def power_model(meta: dict) -> tuple[float | None, float | None]:
    """(idle, max) watts declared on the node; a bad or inconsistent pair is dropped and logged."""
    name = meta.get("name", "")
    try:
        idle, peak = _watts(meta, POWER_IDLE_KEY), _watts(meta, POWER_MAX_KEY)
        if idle is not None and peak is not None and peak < idle:
            raise ValueError(f"{POWER_MAX_KEY} ({peak}) is below {POWER_IDLE_KEY} ({idle})")
    except ValueError as exc:
        if _power_warnings.get(name) != str(exc):
            _power_warnings[name] = str(exc)
            log.warning("node %s: ignoring its power model: %s", name, exc)
        return None, None
    _power_warnings.pop(name, None)
    return idle, peak


def node_from_api(node: dict) -> KubeNode:
    """A node object as the API sends it (JSON, camelCase keys)."""
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ip = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
    meta = node["metadata"]
    return KubeNode(meta["name"], ip, _quantity(allocatable, "cpu", 1000.0), _quantity(allocatable, "memory"),
                    _quantity(allocatable, "pods"), *power_model(meta))


def pod_requests(spec: dict) -> tuple[float, float]:
    """Effective requests the way the scheduler counts them: max(sum of containers, largest init
    container) plus overhead."""
    def total(containers) -> tuple[float, float]:
        cpu = mem = 0.0
        for c in containers or []:
            req = (c.get("resources") or {}).get("requests") or {}
            cpu += _quantity(req, "cpu", 1000.0) or 0.0
            mem += _quantity(req, "memory") or 0.0
        return cpu, mem

    cpu, mem = total(spec.get("containers"))
    for init in spec.get("initContainers") or []:
        icpu, imem = total([init])
        cpu, mem = max(cpu, icpu), max(mem, imem)
    overhead = spec.get("overhead") or {}
    return cpu + (_quantity(overhead, "cpu", 1000.0) or 0.0), mem + (_quantity(overhead, "memory") or 0.0)


def _node_values(node: KubeNode) -> dict[str, float | None]:
    return {"cpu_capacity": node.cpu_millicores, "memory_capacity": node.memory_bytes, "max_pods": node.max_pods,
            "power_idle_watts": node.power_idle_watts, "power_max_watts": node.power_max_watts}


class KubeState:
    """Follows nodes and the pods bound to them, writing what scoring needs into a NodeTable."""

    def __init__(self, api: client.ApiClient, table: NodeTable | None = None):
        self.api = api
        self._core = client.CoreV1Api(api)
        self.table = table if table is not None else NodeTable()
        self._lock = threading.Lock()
        self._ips: dict[str, str] = {}  # node name -> InternalIP
        self._pods: dict[str, KubePod] = {}  # uid -> what it adds to its node
        self._stop = threading.Event()
        self.nodes_synced = threading.Event()
        self.pods_synced = threading.Event()
        self.error: str | None = None
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_settings(cls, mode: str, kubeconfig: str | None, table: NodeTable) -> KubeState | None:
        """None when mode is off, or auto finds no cluster."""
        if mode == "off":
            return None
        if mode in ("auto", "in-cluster"):
            try:
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                return cls(client.ApiClient(cfg), table)
            except config.ConfigException:
                if mode == "in-cluster":
                    raise
        try:
            return cls(config.new_client_from_config(config_file=kubeconfig), table)
        except (config.ConfigException, OSError, TypeError) as exc:
            if mode == "kubeconfig":
                raise
            log.warning("no Kubernetes API configured (%s): node state comes from requests and Prometheus", exc)
            return None

    def start(self) -> None:
        for name, target in (("nodes", self._run_nodes), ("pods", self._run_pods)):
            thread = threading.Thread(target=target, name=f"kube-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()

    @property
    def synced(self) -> bool:
        return self.nodes_synced.is_set() and self.pods_synced.is_set()

    def ip_map(self) -> dict[str, str]:
        """InternalIP -> node name, to place node_exporter series (instance = ip:port)."""
        with self._lock:
            return {ip: name for name, ip in self._ips.items()}

    def _follow(self, kind: str, list_fn, apply, replace, synced: threading.Event, **kw) -> None:
        """List, then watch from the list's resourceVersion, re-watching from the last event's
        version when a watch times out and listing again only when that version has expired.

        Objects stay raw JSON (orjson) and only the fields scoring needs are read: the client's
        model classes cost a millisecond per pod event, and that CPU (and the GIL) was taken from
        the requests of a burst of bindings."""
        backoff = 1.0
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listing = orjson.loads(list_fn(_preload_content=False, **kw).data)
                    replace(listing.get("items") or [])
                    version = listing["metadata"]["resourceVersion"]
                    synced.set()
                    self.error = None
                resp = list_fn(watch=True, resource_version=version, allow_watch_bookmarks=True,
                               timeout_seconds=WATCH_TIMEOUT_S, _preload_content=False, **kw)
                try:
                    for line in iter_resp_lines(resp):
                        if self._stop.is_set():
                            return
                        if not line:
                            continue
                        event = orjson.loads(line)
                        kind_, obj = event.get("type"), event.get("object") or {}
                        if kind_ == "ERROR":  # 410: the version expired, handled below by listing again
                            raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if kind_ != "BOOKMARK":
                            apply(kind_, obj)
                finally:
                    resp.release_conn()
                backoff = 1.0
            except Exception as exc:  # API errors, connection refused, timeouts, decode errors: list again
                version = None
                if isinstance(exc, ApiException) and exc.status == 410:
                    continue  # the version expired: at once, no backoff
                message = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
                self._failed(kind, message or type(exc).__name__, backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _failed(self, kind: str, message: str, backoff: float) -> None:
        self.error = f"kubernetes {kind}: {message}"
        log.warning("watching %s failed (%s); retrying in %.0f s", kind, message, backoff)
        self._stop.wait(backoff)

    def _run_nodes(self) -> None:
        def replace(items):
            nodes = [node_from_api(n) for n in items]
            with self._lock:
                self._ips = {n.name: n.internal_ip for n in nodes if n.internal_ip}
            self.table.replace_nodes({n.name: _node_values(n) for n in nodes})

        def apply(kind, obj):
            name = obj["metadata"]["name"]
            if kind == "DELETED":
                with self._lock:
                    self._ips.pop(name, None)
                self.table.remove_node(name)
                return
            node = node_from_api(obj)
            with self._lock:
                if node.internal_ip:
                    self._ips[name] = node.internal_ip
            self.table.set_node(name, **_node_values(node))

        self._follow("nodes", self._core.list_node, apply, replace, self.nodes_synced)

    def _run_pods(self) -> None:
        def entry(pod: dict) -> KubePod | None:
            spec = pod.get("spec") or {}
            if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return None
            cpu, mem = pod_requests(spec)
            return KubePod(spec["nodeName"], cpu, mem)

        def replace(items):
            fresh = {p["metadata"]["uid"]: e for p in items if (e := entry(p)) is not None}
            usage: dict[str, list[float]] = {}
            for e in fresh.values():
                u = usage.setdefault(e.node, [0.0, 0.0, 0.0])
                u[0], u[1], u[2] = u[0] + e.cpu_millicores, u[1] + e.memory_bytes, u[2] + 1
            with self._lock:
                self._pods = fresh
                self.table.replace_usage({name: tuple(u) for name, u in usage.items()})

        def apply(kind, pod):
            e = None if kind == "DELETED" else entry(pod)
            uid = pod["metadata"]["uid"]
            with self._lock:  # one pod's delta at a time, in event order
                old = self._pods.pop(uid, None)
                if old is not None and e is not None and old.node == e.node:  # an update: still bound there
                    self._pods[uid] = replace_field(e, bound_at=old.bound_at)
                    if (e.cpu_millicores, e.memory_bytes) != (old.cpu_millicores, old.memory_bytes):  # resized
                        self.table.add_usage(e.node, e.cpu_millicores - old.cpu_millicores,
                                             e.memory_bytes - old.memory_bytes, 0)
                    return
                if old is not None:
                    self.table.add_usage(old.node, -old.cpu_millicores, -old.memory_bytes, -1, old.bound_at)
                if e is not None:
                    e = self._pods[uid] = replace_field(e, bound_at=self.table.now())
                    self.table.add_usage(e.node, e.cpu_millicores, e.memory_bytes, 1, e.bound_at)

        self._follow("pods", self._core.list_pod_for_all_namespaces, apply, replace, self.pods_synced,
                     field_selector="spec.nodeName!=")
