"""Branching a simulation at a decision: the world's own future shared by every branch, or another
future of the same world drawn afresh.

Events do not depend on placements, so branches that share one event stream meet the same future
(common random numbers): the comparison of two placements in them is paired. A comparison on the
world's own future also knows that future; one averaged over futures drawn afresh from the same
moment knows only what a scheduler could: the state, and the world's arrival process.
"""

from __future__ import annotations

import heapq
from typing import Iterator

import numpy as np

from agent.sim import scenarios
from agent.sim.scenarios import Event
from agent.sim.simulator import Simulation


class SharedEvents:
    """An event stream that branches: copies share what has been drawn and the source, each keeps
    its own position."""

    def __init__(self, source: Iterator[Event]):
        self._source, self._drawn, self._next = source, [], 0

    def __iter__(self) -> SharedEvents:
        return self

    def __next__(self) -> Event:
        while self._next >= len(self._drawn):
            self._drawn.append(next(self._source))  # StopIteration ends every branch alike
        event = self._drawn[self._next]
        self._next += 1
        return event

    def __deepcopy__(self, memo: dict) -> SharedEvents:
        twin = SharedEvents.__new__(SharedEvents)
        twin._source, twin._drawn, twin._next = self._source, self._drawn, self._next
        return twin


def branchable(sim: Simulation) -> Simulation:
    """`sim`, made safe to copy.deepcopy at a decision (its generator of events replaced)."""
    if not isinstance(sim.events, SharedEvents):
        sim.replace_events(SharedEvents(sim.events))
    return sim


# how far past the decision a redrawn future still looks for the departure of a pod already there, in
# the world's mean pod lifetimes: an exponential lifetime outlives it with probability e^-50
_DEPARTURE_LOOKAHEAD_LIFETIMES = 50.0


def redraw_future(sim: Simulation, rng: np.random.Generator) -> Simulation:
    """`sim` (a branchable copy of a world on its own stream, at a decision) with the arrivals after
    this moment drawn afresh from its world's arrival process: the pods already there leave when they
    would have, node churn and latency shifts keep their schedule, every pod still to come is new.
    Branchable in turn.

    What is already there comes from the simulation's state, not from the stream's history: a stream
    made branchable after a warm start has not seen the pods that arrived before."""
    alive = sim.pods_to_leave()
    # a gone pod's id may come again among the new ones, as its departure is not among the events kept
    fresh = scenarios.arrivals(sim.world, rng, sim.time, sim.first_unused_pod_id())
    until = sim.time + _DEPARTURE_LOOKAHEAD_LIFETIMES * sim.world.mean_lifetime_s
    sim.replace_events(SharedEvents(heapq.merge(_known(sim.events, alive, sim.world, sim.time, until), fresh)))
    return sim


def _known(events: Iterator[Event], alive: set[int], world, now: float, until: float) -> Iterator[Event]:
    """The events of a stream that concern what is already there: the departures of the `alive` pods,
    node churn, latency shifts; not the arrivals to come nor their departures. Ends once nothing of that
    is left (the stream itself is endless), and at `until` in any case: a pod whose departure was drawn
    before the stream was wrapped must not send the scan through the endless rest of it."""
    alive = set(alive)
    last_shift = max(world.latency_shifts_s, default=0.0)

    def done(t: float) -> bool:
        return t > until or (not alive and not world.churn and t >= last_shift)

    if done(now):
        return
    for event in events:
        if done(event.time):
            return
        if event.kind == "arrive" or (event.kind == "depart" and event.pod_id not in alive):
            continue
        yield event
        if event.kind == "depart":
            alive.discard(event.pod_id)
