"""Cluster profiles (rlscore.core.profile) as simulated worlds, and back; a profile as a scenario family.

`rlscore-tune --profile` tunes a cluster described this way; without one it generates a profile from a
scenario family and writes it beside the result, so every tuning can be replayed.
"""

from __future__ import annotations

from agent.sim.world import Hardware, NodeSpec, PodClass, World
from rlscore.core.profile import ClusterProfile, Dynamics, NodeGroup, NodeType, PodClassProfile, Workload


def profile_world(profile: ClusterProfile) -> World:
    """The simulated world a profile describes."""
    types = {t.name: Hardware(t.name, t.cpu_millicores, t.memory_bytes, t.max_pods, t.power_idle_watts,
                              t.power_max_watts, t.disk_bytes) for t in profile.node_types}
    nodes = tuple(NodeSpec(types[g.type], float(lat)) for g in profile.nodes for lat in g.latency_ms)
    classes = tuple(PodClass(c.name, c.weight, tuple(c.cpu_millicores), tuple(c.memory_per_cpu_gib),
                             tuple(c.usage), tuple(tuple(p) for p in c.latency_limits_ms), c.lifetime_scale)
                    for c in profile.workload.pod_classes)
    d = profile.dynamics
    hidden = ()
    if any(g.power_hidden for g in profile.nodes):
        hidden = tuple(h for g in profile.nodes for h in (g.power_hidden or [False] * len(g.latency_ms)))
    return World(profile.family, nodes, classes, power_hidden=hidden, arrivals=profile.workload.arrivals, load=profile.workload.load,
                 mean_lifetime_s=profile.workload.mean_lifetime_s, latency_shifts_s=tuple(d.latency_shifts_s),
                 churn=d.churn, churn_interval_s=d.churn_interval_s, metrics_interval_s=d.metrics_interval_s,
                 power_visible=d.power_visible, latency_drift=d.latency_drift,
                 hourly_rate=tuple(profile.workload.hourly_rate), start_hour=profile.workload.start_hour,
                 burst_size=profile.workload.burst_size,
                 background_cpu=tuple(d.background_cpu), usage_onset_s=d.usage_onset_s,
                 usage_linger_s=d.usage_linger_s)



def world_profile(world: World, name: str) -> ClusterProfile:
    """The profile of a simulated world (what `rlscore-tune` writes beside its result)."""
    types: dict[str, Hardware] = {}
    groups: list[tuple[str, list[float], list[bool]]] = []  # runs of one type, so the node order is kept
    hidden = world.power_hidden or (False,) * world.size
    for spec, unknown in zip(world.nodes, hidden):
        hw = spec.hardware
        if types.setdefault(hw.name, hw) != hw:
            raise ValueError(f"two different machine types are both called {hw.name!r}")
        if not groups or groups[-1][0] != hw.name:
            groups.append((hw.name, [], []))
        groups[-1][1].append(float(spec.latency_ms))
        groups[-1][2].append(bool(unknown))
    return ClusterProfile(
        name=name, family=world.family,
        nodeTypes=[NodeType(name=h.name, cpuMillicores=h.cpu_millicores, memoryBytes=h.memory_bytes,
                            maxPods=h.max_pods, powerIdleWatts=h.power_idle_watts,
                            powerMaxWatts=h.power_max_watts, diskBytes=h.disk_bytes) for h in types.values()],
        nodes=[NodeGroup(type=t, latencyMs=lat, powerHidden=unknown if world.power_hidden else [])
               for t, lat, unknown in groups],
        workload=Workload(arrivals=world.arrivals, load=world.load, meanLifetimeSeconds=world.mean_lifetime_s,
                          hourlyRate=list(world.hourly_rate), startHour=world.start_hour, burstSize=world.burst_size,
                          podClasses=[PodClassProfile(
                              name=c.name, weight=c.weight, cpuMillicores=list(c.cpu_millicores),
                              memoryPerCpuGiB=list(c.memory_per_cpu_gib), usage=list(c.usage),
                              latencyLimitsMs=[list(p) for p in c.latency_limits], lifetimeScale=c.lifetime_scale)
                              for c in world.pod_classes]),
        dynamics=Dynamics(metricsIntervalSeconds=world.metrics_interval_s,
                          latencyShiftsSeconds=list(world.latency_shifts_s), latencyDrift=world.latency_drift,
                          churn=world.churn, churnIntervalSeconds=world.churn_interval_s,
                          powerVisible=world.power_visible, backgroundCpu=list(world.background_cpu),
                          usageOnsetSeconds=world.usage_onset_s, usageLingerSeconds=world.usage_linger_s))


PROFILE_LOAD_JITTER = (0.8, 1.25)  # training draws vary the profile's load by this factor


def register_profile(profile: ClusterProfile) -> str:
    """Make the profile a scenario family, `profile:<name>`, so training, teachers and evaluation
    draw from it like from any other: the same nodes and workload every time, new arrivals per seed;
    training draws also vary the load (the workload a profile records is one sample of the cluster's).
    No policy lists it among its own families, so the defaults elsewhere do not change."""
    from dataclasses import replace

    from agent.sim.families import PROFILE_FAMILIES, Family

    name = f"profile:{profile.name}"
    world = replace(profile_world(profile), family=name)  # results and teachers are keyed by the family

    def draw(rng, n, limits, training):
        if not training:
            return world
        return replace(world, load=min(2.0, world.load * float(rng.uniform(*PROFILE_LOAD_JITTER))))

    PROFILE_FAMILIES[name] = Family(name, (), f"the cluster profile {profile.name} ({world.size} nodes)", draw,
                            eval_nodes=(world.size,))
    return name
