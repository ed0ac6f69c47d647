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

    def past(self) -> list[Event]:
        """The events this branch has consumed."""
        return self._drawn[:self._next]


def branchable(sim: Simulation) -> Simulation:
    """`sim`, made safe to copy.deepcopy at a decision (its generator of events replaced)."""
    if not isinstance(sim._events, SharedEvents):
        sim._events = SharedEvents(sim._events)
    return sim


def redraw_future(sim: Simulation, rng: np.random.Generator) -> Simulation:
    """`sim` (a branchable copy of a world on its own stream, at a decision) with the arrivals after
    this moment drawn afresh from its world's arrival process: the pods already there leave when they
    would have, node churn and latency shifts keep their schedule, every pod still to come is new.
    Branchable in turn."""
    own: SharedEvents = sim._events
    past = own.past()
    first_new = 1 + max((e.pod.id for e in past if e.kind == "arrive"), default=-1)  # numbered as they arrive
    pending = first_new - sum(e.kind == "depart" for e in past)
    fresh = scenarios.arrivals(sim.world, rng, sim.time, first_new)
    sim._events = SharedEvents(heapq.merge(_known(own, first_new, pending, sim.world, sim.time), fresh))
    return sim


def _known(events: Iterator[Event], first_new: int, pending: int, world, now: float) -> Iterator[Event]:
    """The events of a stream that concern what is already there: the departures of the `pending` pods
    that arrived and have not left, node churn, latency shifts; not the arrivals to come nor their
    departures. Ends once nothing of that is left (the stream itself is endless)."""
    last_shift = max(world.latency_shifts_s, default=0.0)

    def done(t: float) -> bool:
        return pending <= 0 and not world.churn and t >= last_shift

    if done(now):
        return
    for event in events:
        if event.kind == "arrive" or (event.kind == "depart" and event.pod_id >= first_new):
            continue
        yield event
        pending -= event.kind == "depart"
        if done(event.time):
            return
